"""``dpmine``: the analyst's command line (datasets, schema, budget, counts, quality, miners,
rule lists).

The server URL and API key come from ``--url``/``--api-key`` or ``DPMINE_URL``/``DPMINE_API_KEY``.
``--json`` prints machine-readable output instead of tables. These global options may come before
or after the command (``dpmine schema mammals --json``).

A mistake prints one line ``error: …`` on stderr and no traceback (DESIGN.md "Errors"): exit code
2 when the command or its request must change (a bad option, a parameter refused on the client,
or a request the server refused without charging it), 1 when the run itself failed (server
unreachable, an operation that failed after its charge, a job still running or cancelled).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from dpmine.amounts import epsilon_text
from dpmine.connection import Connection, connect
from dpmine.errors import (
    ChargeKeptNoResultError,
    DPMineError,
    JobCancelledError,
    OperationFailedError,
    ParameterError,
    RateLimitedError,
    RequestInProgressError,
    ServerError,
    TransportError,
    parameter_error,
)
from dpmine.intervals import (
    LEVEL,
    Interval,
    StatisticIntervals,
    cell_interval,
    excess_of,
    format_with_interval,
    half_width,
    quality_intervals,
)
from dpmine.miners import (
    AltExpM,
    AltMCMC,
    BaseMiner,
    DPLayeredTrees,
    ItemsetPlan,
    MCMCTreePair,
    MinedItemset,
    Plan,
    Preset,
    RunStoppedWarning,
    SerenadeCS,
    SerenadeES,
    SerenadePlan,
    TopKItemsets,
)
from dpmine.miners._rho import amount_text, spent_text
from dpmine.miners.layered import FinalRelease, QueryRule, SeedRule
from dpmine.miners.trees import (
    TreeMinerParameters,
    TreePlan,
    tree_record,
)
from dpmine.queries import QuerySyntaxError, format_query, parse_query
from dpmine.rule_lists import (
    DEFAULT_ITERATIONS,
    DEFAULT_K_PER_CLASS,
    DEFAULT_MAX_LENGTH,
    DEFAULT_MAX_RULES,
    DPBayesianRuleList,
    RuleList,
)
from dpmine.significance import percent_at_least, verdict_fields, verdict_text
from dpmine.tables import print_table
from dpmine.treereds import DEFAULT_MIN_JACCARD, DEFAULT_P_MAX
from dpmine.wire import (
    DEFAULT_NUMERIC_BINS,
    DEFAULT_TREE_ITERATIONS,
    MAX_EXACT_RULES,
    MIN_RULE_LIST_ITERATIONS,
    MIN_TREE_ITERATIONS,
    BooleanAttribute,
    CategoricalAttribute,
    ComputeQualityResponse,
    CountNoise,
    CountNoiseKind,
    DatasetMetadata,
    GuaranteePolicy,
    LeafCountsRelease,
    NumericAttribute,
    Receipt,
    SerenadeOptions,
    TreePairScore,
    TreeSampler,
)

#: Global options and how many values each takes; accepted before or after the command.
GLOBAL_OPTIONS = {"--json": 0, "--url": 1, "--api-key": 1}
#: Failures of the run itself (exit 1); every other DPMineError asks to change the command (2).
_RUN_FAILURES: tuple[type[DPMineError], ...] = (
    TransportError,
    OperationFailedError,
    ChargeKeptNoResultError,
    RequestInProgressError,
    JobCancelledError,
    RateLimitedError,
)


def hoist_global_options(args: Sequence[str]) -> list[str]:
    """``args`` with the global options (and their values) moved before the command, so that
    ``schema mammals --json`` reads as ``--json schema mammals``; ``--`` ends the search."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest += args[index:]
            break
        name = arg.partition("=")[0]
        width = 1 if "=" in arg else 1 + GLOBAL_OPTIONS.get(name, 0)
        if (
            name in GLOBAL_OPTIONS
            and (arg == name or GLOBAL_OPTIONS[name] == 1)
            and index + width <= len(args)
        ):
            front += args[index : index + width]
            index += width
            continue
        rest.append(arg)
        index += 1
    return front + rest


def exit_code_of(error: DPMineError) -> int:
    """1 when the run failed (server unreachable or failing, work in flight), 2 when the command
    or request must change (refused on the client, or by the server without a charge)."""
    if isinstance(error, _RUN_FAILURES):
        return 1
    if isinstance(error, ServerError):
        status = error.status_code
        return 1 if status is not None and status >= 500 else 2
    return 2 if isinstance(error, ParameterError) else 1


def _print_error(message: str) -> None:
    """One line ``error: …`` on stderr."""
    line = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(line)}")


class _DPMineGroup(TyperGroup):
    """The ``dpmine`` command: global options in either position, and every mistake reported as
    one ``error:`` line (exit 2 for usage errors) instead of a usage box or a traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        arguments = hoist_global_options(sys.argv[1:] if args is None else list(args))
        settings: dict[str, Any] = {
            "prog_name": prog_name,
            "complete_var": complete_var,
            "standalone_mode": False,
            "windows_expand_args": windows_expand_args,
            **extra,
        }
        if not standalone_mode:
            return super().main(arguments, **settings)
        try:
            outcome = super().main(arguments, **settings)
        except typer.TyperException as error:
            sys.exit(_report_usage_error(error))
        except DPMineError as error:
            _print_error(str(error))
            sys.exit(exit_code_of(error))
        except ValidationError as error:
            _print_error(str(parameter_error(error)))
            sys.exit(2)
        except typer.Abort:
            _print_error("aborted")
            sys.exit(1)
        sys.exit(outcome if isinstance(outcome, int) else 0)


def _report_usage_error(error: typer.TyperException) -> int:
    """Print a click usage error as one line (or the help it carries) and give its exit code."""
    message = error.format_message()
    if "\n" in message.strip():  # no arguments: the error is the command's help
        typer.echo(message)
        return error.exit_code
    context = getattr(error, "ctx", None)
    hint = f"; see '{context.command_path} --help'" if context is not None else ""
    _print_error(f"{message.rstrip('.')}{hint}")
    return error.exit_code


app = typer.Typer(
    cls=_DPMineGroup,
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Query a dpmine server: every data-touching call is charged to your budget. The "
    "global options --url, --api-key and --json may come before or after the command.",
)
console = Console()


@dataclass
class _Options:
    url: str
    api_key: str
    as_json: bool


def _options(ctx: typer.Context) -> _Options:
    options: _Options = ctx.obj
    return options


@app.callback()
def main_options(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option(envvar="DPMINE_URL", help="Server URL")
    ] = "http://127.0.0.1:8000",
    api_key: Annotated[
        str, typer.Option(envvar="DPMINE_API_KEY", help="Your API key", show_default=False)
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")] = False,
) -> None:
    """Global options."""
    ctx.obj = _Options(url=url, api_key=api_key, as_json=as_json)


def _connect(options: _Options) -> Connection:
    if not options.api_key:
        raise _fail("no API key: pass --api-key or set DPMINE_API_KEY")
    return connect(options.url, options.api_key)


def _fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` and give the exit to raise (2: change the command)."""
    _print_error(message)
    return typer.Exit(code=code)


def _emit(options: _Options, value: BaseModel | list[Any] | dict[str, Any], table: Table) -> None:
    """``value`` as JSON with --json, else ``table``: fitted to the terminal, or one line per
    row when piped (:func:`dpmine.tables.print_table`); a table without rows is one line, e.g.
    ``top-10 itemsets: none``, then its caption (the receipts)."""
    if options.as_json:
        if isinstance(value, BaseModel):
            typer.echo(value.model_dump_json(indent=2))
        else:
            typer.echo(json.dumps(value, indent=2, default=str))
    else:
        print_table(table)


def _check_output(
    path: Path | None, suffixes: Sequence[str] = (), option: str = "--output"
) -> None:
    """Refuse, before anything is charged, an output file that could not be written: a wrong
    suffix or a folder that does not exist."""
    if path is None:
        return
    if suffixes and path.suffix not in suffixes:
        raise _fail(f"{option} must end in {' or '.join(suffixes)}, got {str(path)!r}")
    folder = path.parent
    if not folder.is_dir():
        raise _fail(f"{option}: the folder {str(folder)!r} does not exist; create it first")
    if path.is_dir():
        raise _fail(f"{option}: {str(path)!r} is a folder; give a file name")


def _receipt_line(receipt: Receipt) -> str:
    replay = " (replayed, not charged again)" if receipt.replayed else ""
    if receipt.zcdp is not None:  # a zCDP dataset: the ledger debited ρ
        return (
            f"ran at ε={epsilon_text(receipt.epsilon_exact)}, charged ρ={receipt.zcdp.rho_exact} "
            f"({receipt.guarantee}) · ledger entry {receipt.ledger_entry_id} · remaining "
            f"ρ={receipt.zcdp.rho_remaining:.6g}{replay}"
        )
    return (
        f"charged ε={epsilon_text(receipt.epsilon_exact)} ({receipt.guarantee}) · ledger entry "
        f"{receipt.ledger_entry_id} · remaining ε={epsilon_text(receipt.remaining_epsilon)}{replay}"
    )


def _spent(receipts: list[Receipt]) -> str:
    """ "ε spent = …" (or on a zCDP dataset "ρ spent = …"): :func:`spent_text`."""
    unit, amount = spent_text(receipts)
    return f"{unit} spent = {amount}"


def _miner_spent(miner: BaseMiner) -> str:
    """As :func:`_spent` for a miner's last run, a failed call's charge included
    (``spent_exact``)."""
    unit, amount = miner.spent_exact()
    return f"{unit} spent = {amount_text(unit, amount)}"


def _run(options: _Options, action: Any) -> Any:
    """Run ``action`` on a connection; a miner's :class:`RunStoppedWarning` is not printed as
    a Python warning, since every mining command shows where a run stopped in its output."""
    try:
        with _connect(options) as connection, warnings.catch_warnings():
            warnings.simplefilter("ignore", RunStoppedWarning)
            return action(connection)
    except DPMineError as error:
        raise _fail(str(error), exit_code_of(error)) from error
    except ValidationError as error:
        raise _fail(str(parameter_error(error))) from error


@app.command()
def datasets(ctx: typer.Context) -> None:
    """Datasets you can query."""
    options = _options(ctx)
    rows = _run(options, lambda c: c.datasets())
    table = Table(
        "id", "name", "kind", "attributes / items", "version", "guarantees", title="datasets"
    )
    for info in rows:
        size = (
            len(info.metadata.items)
            if info.metadata.kind == "transactions"
            else len(info.metadata.attributes)
        )
        table.add_row(
            info.id,
            escape(info.name),
            info.metadata.kind,
            str(size),
            str(info.version),
            info.guarantee_policy,
        )
    _emit(options, [r.model_dump(mode="json") for r in rows], table)


def _schema_table(metadata: DatasetMetadata, policy: GuaranteePolicy) -> Table:
    table = Table("attribute", "view", "type", "public domain", title=f"{metadata.kind} schema")
    for attribute in metadata.attributes:
        if isinstance(attribute, NumericAttribute):
            domain = f"[{attribute.lo:g}, {attribute.hi:g}]"
        elif isinstance(attribute, CategoricalAttribute):
            shown = ", ".join(attribute.categories[:8])
            domain = shown + (" …" if len(attribute.categories) > 8 else "")
        else:
            assert isinstance(attribute, BooleanAttribute)
            domain = "true/false"
        table.add_row(escape(attribute.name), attribute.view or "-", attribute.type, escape(domain))
    if metadata.kind == "transactions":
        shown = ", ".join(metadata.items[:20])
        items = shown + (" …" if len(metadata.items) > 20 else "")
        table.add_row("(items)", "-", "item", escape(items))
    served = (
        "pure guarantees only (the MCMC samplers are refused)"
        if policy == "pure_only"
        else "pure and approximate guarantees"
    )
    table.caption = f"public row bound n_max = {metadata.n_max}; serves {served}"
    return table


@app.command()
def schema(
    ctx: typer.Context, dataset_id: Annotated[str, typer.Argument(metavar="DATASET")]
) -> None:
    """Public schema of a dataset (declared by its owner; free)."""
    options = _options(ctx)
    handle = _run(options, lambda c: c.dataset(dataset_id))
    _emit(options, handle.info, _schema_table(handle.schema, handle.guarantee_policy))


@app.command()
def budget(
    ctx: typer.Context, dataset_id: Annotated[str, typer.Argument(metavar="DATASET")]
) -> None:
    """Your grant on a dataset and what is left (free)."""
    options = _options(ctx)
    status = _run(options, lambda c: c.dataset(dataset_id).budget())
    if status.zcdp is not None:  # a zCDP dataset: ρ exactly, and the ε it implies
        amounts = status.zcdp
        default = " (default)" if amounts.delta_is_default else ""
        table = Table(
            "grant ρ",
            "spent ρ",
            "remaining ρ",
            f"ε spent at δ={amounts.delta:g}{default}",
            title=f"{dataset_id} (zCDP)",
        )
        table.add_row(
            amounts.rho_exact,
            f"{amounts.rho_spent:.6g}",
            f"{amounts.rho_remaining:.6g}",
            f"{amounts.epsilon_spent:.6g} of {amounts.epsilon:.6g}",
        )
        _emit(options, status, table)
        return
    table = Table("grant ε", "spent ε", "remaining ε", "dataset cap left ε", title=dataset_id)
    table.add_row(
        epsilon_text(status.grant_epsilon),
        epsilon_text(status.grant_spent),
        epsilon_text(status.remaining_epsilon),
        epsilon_text(status.dataset_remaining),
    )
    _emit(options, status, table)


def _range_check(
    low: float, high: float, *, open_low: bool, open_high: bool
) -> Callable[[float | None], float | None]:
    """A typer callback refusing a value outside the interval (None passes: option not given)."""
    shown = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        below = value <= low if open_low else value < low
        above = value >= high if open_high else value > high
        if math.isnan(value) or below or above:
            wanted = f"> {low:g}" if math.isinf(high) and open_low else f"in {shown}"
            wanted = f">= {low:g}" if math.isinf(high) and not open_low else wanted
            raise typer.BadParameter(f"must be {wanted} (got {value:g})")
        return value

    return check


def _chain_length(minimum: int) -> Callable[[int], int]:
    """A typer callback refusing fewer MCMC steps than the server's public ``minimum``."""

    def check(value: int) -> int:
        if value < minimum:
            raise typer.BadParameter(
                f"must be at least {minimum}, the server's public minimum for an MCMC release "
                f"(a shorter chain's release is far from DP; got {value})"
            )
        return value

    return check


_positive = _range_check(0.0, math.inf, open_low=True, open_high=True)
_non_negative = _range_check(0.0, math.inf, open_low=False, open_high=True)
_open_unit = _range_check(0.0, 1.0, open_low=True, open_high=True)
_closed_unit = _range_check(0.0, 1.0, open_low=False, open_high=False)

EpsilonOption = Annotated[
    float, typer.Option(help="Privacy cost of this call (ε > 0)", callback=_positive)
]
#: A miner's budget: --epsilon on a pure-DP dataset, --rho on a zCDP one (issue #24).
BudgetOption = Annotated[
    float | None,
    typer.Option(
        "--epsilon",
        help="The run's budget in ε (> 0) on a pure-DP dataset (on a zCDP one give --rho)",
        callback=_positive,
    ),
]
RhoOption = Annotated[
    float | None,
    typer.Option(
        "--rho",
        help="The run's budget in zCDP ρ (> 0) on a zCDP dataset, e.g. 0.0174 for about "
        "(ε = 1, δ = 1e-6)",
        callback=_positive,
    ),
]


def _budget(epsilon: float | None, rho: float | None, default: float = 1.0) -> float:
    """The miner's ``epsilon`` for --epsilon / --rho (exactly one given): --epsilon, or the
    miner's default when the budget is --rho (the miner then spends ρ)."""
    if epsilon is not None and rho is not None:
        raise _fail("give the budget once: --epsilon on a pure-DP dataset, --rho on a zCDP one")
    if epsilon is None and rho is None:
        raise _fail("give the run's budget: --epsilon on a pure-DP dataset, --rho on a zCDP one")
    return default if epsilon is None else epsilon


@app.command()
def count(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: EpsilonOption,
    where: Annotated[
        str | None,
        typer.Option(help='Predicate, e.g. "[odor = n] & [bruises]"'),
    ] = None,
) -> None:
    """Noisy count of rows (satisfying --where); costs --epsilon."""
    options = _options(ctx)
    try:
        predicate = parse_query(where) if where else None
    except QuerySyntaxError as error:
        raise _fail(str(error)) from error

    def action(connection: Connection) -> Any:
        return connection.dataset(dataset_id).count(predicate, epsilon=epsilon)

    result = _run(options, action)
    noise = result.noise or CountNoise(kind="laplace", scale=1.0 / result.receipt.epsilon)
    t = half_width(noise.scale, 1.0 - LEVEL, noise.kind)
    interval = Interval(*cell_interval(result.count, t))  # the true count is ≥ 0
    table = Table("predicate", "noisy count [90 %]", "noise", title=dataset_id)
    table.add_row(
        escape(format_query(predicate)) if predicate else "(all rows)",
        format_with_interval(result.count, interval, ".0f"),
        _noise_text(noise.kind, noise.scale),
    )
    table.caption = _receipt_line(result.receipt)
    _emit(options, result, table)


def _noise_text(kind: CountNoiseKind, scale: float) -> str:
    """``noise scale 5`` (discrete Laplace) or ``discrete Gaussian noise σ 5`` (zCDP datasets)."""
    if kind == "discrete_gaussian":
        return f"discrete Gaussian noise σ {scale:.3g}"
    return f"noise scale {scale:.3g}"


def _quality_table(result: ComputeQualityResponse, left: str, right: str) -> Table:
    stats = result.statistics
    iv = quality_intervals(result)
    table = Table(
        "left",
        "right",
        "support [90 %]",
        "union [90 %]",
        "Jaccard [90 %]",
        "J − J_ind [90 %]",
        "p-value [90 %]",
        title="noisy quality",
    )
    s_left, s_right, n_rows = stats.support_left, stats.support_right, stats.n_rows
    excess = (
        "-"
        if s_left is None or s_right is None or n_rows is None
        else format_with_interval(excess_of(stats.jaccard, s_left, s_right, n_rows), iv.excess)
    )
    table.add_row(
        escape(left),
        escape(right),
        format_with_interval(stats.support, iv.support, ".0f"),
        format_with_interval(stats.union, iv.union, ".0f"),
        _jaccard_cell(stats.jaccard, iv),
        excess,
        "-" if stats.p_value is None else format_with_interval(stats.p_value, iv.p_value, ".2g"),
    )
    table.caption = f"{_receipt_line(result.receipt)}; {_noise_text(iv.noise, iv.scale)} per cell"
    return table


def _jaccard_cell(jaccard: float, intervals: StatisticIntervals) -> str:
    """``0.70 [0.62, 0.77]``, marked when the interval spans most of [0, 1]."""
    text = format_with_interval(jaccard, intervals.jaccard)
    return f"{text} (uninformative)" if intervals.uninformative else text


@app.command()
def quality(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: EpsilonOption,
    left_query: Annotated[
        str | None, typer.Argument(metavar="LEFT", help="Left query (or --left)")
    ] = None,
    right_query: Annotated[
        str | None, typer.Argument(metavar="RIGHT", help="Right query (or --right)")
    ] = None,
    left_option: Annotated[str | None, typer.Option("--left", help="Left query")] = None,
    right_option: Annotated[str | None, typer.Option("--right", help="Right query")] = None,
    mode: Annotated[str, typer.Option(help="cells (default) or paper")] = "cells",
) -> None:
    """Noisy support cells, Jaccard and p-value of a redescription LEFT <=> RIGHT (given as
    arguments or as --left/--right); costs --epsilon."""
    options = _options(ctx)
    if mode not in {"cells", "paper"}:
        raise _fail("--mode must be 'cells' or 'paper'")
    left, right = _sides(left_query, right_query, left_option, right_option)

    def action(connection: Connection) -> Any:
        return connection.dataset(dataset_id).quality(
            left, right, epsilon=epsilon, mode="paper" if mode == "paper" else "cells"
        )

    result = _run(options, action)
    _emit(options, result, _quality_table(result, left, right))


def _sides(
    left_query: str | None,
    right_query: str | None,
    left_option: str | None,
    right_option: str | None,
) -> tuple[str, str]:
    """The two queries of ``quality``, from the LEFT RIGHT arguments or --left/--right."""
    given = [q for q in (left_query, right_query) if q is not None]
    if left_option is not None or right_option is not None:
        if given:
            raise _fail("give the queries either as LEFT RIGHT or as --left/--right, not both")
        if left_option is None or right_option is None:
            raise _fail("give both --left and --right")
        return left_option, right_option
    if left_query is None or right_query is None:
        raise _fail('give the two queries, e.g. quality DATASET "[odor = n]" "[class = e]"')
    return left_query, right_query


mine_app = typer.Typer(
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Run a private miner (plan first with --plan-only; free).",
)
app.add_typer(mine_app, name="mine")


ColumnsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--columns",
        help="Attributes the miner may use: comma-separated or repeated [default: all]",
    ),
]
ExcludeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        help="Attributes the miner may not use (e.g. a column that gives the label away): "
        "comma-separated or repeated",
    ),
]


def _column_names(values: Sequence[str] | None, schema: DatasetMetadata) -> list[str] | None:
    """The names given to --columns / --exclude: a value that names a column of the schema is
    kept whole (a name may hold a comma), any other is split at its commas."""
    if values is None:
        return None
    known = {attribute.name for attribute in schema.attributes}
    names: list[str] = []
    for value in values:
        parts = [value] if value in known else value.split(",")
        names.extend(part.strip() for part in parts if part.strip())
    return names


def _bins(value: int) -> int:
    """--numeric-bins: 0 (numeric attributes give no items) or at least 2."""
    if value == 1 or value < 0:
        raise typer.BadParameter(f"must be 0 (no numeric items) or at least 2 (got {value})")
    return value


def _parse_length(text: str) -> int | tuple[int, int] | Literal["auto"]:
    if text == "auto":
        return "auto"
    low, separator, high = text.partition("-")
    try:
        return (int(low), int(high)) if separator else int(low)
    except ValueError:
        raise _fail(f"--length must be auto, a number or a range like 1-3, got {text!r}") from None


@mine_app.command("itemsets")
def mine_itemsets(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    k: Annotated[int, typer.Option("--k", help="How many itemsets", min=1)] = 10,
    length: Annotated[
        str,
        typer.Option(
            help="Itemset length or range, e.g. 3 or 1-3; auto = the longest of 3, 2, 1 the "
            "server serves at this K and ε (decided from public values, free)"
        ),
    ] = "auto",
    method: Annotated[str, typer.Option(help="em (Algorithm 1) or laplace (Algorithm 2)")] = "em",
    threshold_quantile: Annotated[
        float,
        typer.Option(
            help="Truncation failure probability of the selection, in (0, 1)",
            callback=_open_unit,
        ),
    ] = 0.1,
    counts: Annotated[bool, typer.Option(help="Also release noisy counts")] = True,
    count_share: Annotated[
        float,
        typer.Option(
            help="Share of the budget (ε, or ρ on a zCDP dataset) for the counts, in (0, 1)",
            callback=_open_unit,
        ),
    ] = 0.5,
    frequency_epsilon: Annotated[
        float,
        typer.Option(
            help="ε for a noisy row count (frequencies); 0 = none", callback=_non_negative
        ),
    ] = 0.0,
    rules: Annotated[
        float | None,
        typer.Option(
            help="Show association rules with this minimum confidence, in [0, 1]",
            callback=_closed_unit,
        ),
    ] = None,
    numeric_bins: Annotated[
        int,
        typer.Option(
            help="Numeric attributes as items: this many equal-width public bins (the owner's "
            "grid if declared), as rule lists do; 0 = no numeric items",
            callback=_bins,
        ),
    ] = DEFAULT_NUMERIC_BINS,
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    min_count: Annotated[
        int,
        typer.Option(
            help="Show the picks whose count is confirmed to reach this many rows (all shown "
            "together at 99 %)",
            min=1,
        ),
    ] = 1,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="Show every pick, not only those whose count is confirmed"),
    ] = False,
    output: Annotated[Path | None, typer.Option(help="Write results to .json or .csv")] = None,
    plan_only: Annotated[bool, typer.Option(help="Only price the run (free)")] = False,
) -> None:
    """Private top-K frequent itemsets (Bhaskar et al.); costs --epsilon, or --rho on a zCDP
    dataset (+ --frequency-epsilon). Shows the picks whose noisy count confirms them (--all:
    every pick); each count comes with an interval holding the true count (all K together,
    90 %)."""
    options = _options(ctx)
    if method not in {"em", "laplace"}:
        raise _fail("--method must be 'em' or 'laplace'")
    _check_output(output, (".json", ".csv"))
    miner = TopKItemsets(
        k=k,
        length=_parse_length(length),
        epsilon=_budget(epsilon, rho, default=1.4),
        rho=rho,
        method="em" if method == "em" else "laplace",
        threshold_quantile=threshold_quantile,
        with_counts=counts,
        count_share=count_share,
        frequency_epsilon=frequency_epsilon,
        numeric_bins=numeric_bins or None,
        min_count=min_count,
    )

    def action(connection: Connection) -> Any:
        dataset = connection.dataset(dataset_id)
        miner.columns = _column_names(columns, dataset.schema)
        miner.exclude = _column_names(exclude, dataset.schema) or ()
        if plan_only:
            return miner.plan(dataset)
        with console.status("mining itemsets on the server…"):
            return miner.mine(dataset)

    result = _run(options, action)
    if isinstance(result, Plan):
        _emit_plan(options, dataset_id, result)
        return
    if output is not None:
        (miner.to_csv if output.suffix == ".csv" else miner.to_json)(output)
    shown = miner.all_itemsets_ if show_all else miner.itemsets_
    title = f"top-{k} itemsets" + ("" if show_all else " confirmed by their counts")
    table = _itemsets_table(miner, shown, title, show_all=show_all)
    payload: dict[str, Any] = {
        "itemsets": [asdict(itemset) for itemset in shown],
        **miner.summary(),
        "receipts": [receipt.model_dump(mode="json") for receipt in miner.receipts_],
    }
    _emit(options, payload, table)
    if rules is not None:
        found = miner.rules(min_confidence=rules)
        rule_table = Table(
            "antecedent",
            "consequent",
            "noisy support",
            "confidence",
            "lift",
            title="association rules (post-processing of the noisy counts)",
        )
        for rule in found:
            rule_table.add_row(
                escape(" & ".join(rule.antecedent)),
                escape(" & ".join(rule.consequent)),
                str(rule.noisy_support),
                f"{rule.confidence:.3f}",
                "-" if rule.lift is None else f"{rule.lift:.3f}",
            )
        _emit(options, [asdict(rule) for rule in found], rule_table)


def _itemsets_table(
    miner: TopKItemsets, shown: Sequence[MinedItemset], title: str, *, show_all: bool
) -> Table:
    """The shown itemsets: rank, the rows counted, the noisy count, the interval of the true
    count and its confirmed floor, the noisy frequency (``show_all``: every pick, with whether
    it is confirmed); the caption says what the rank, the test and the intervals mean, what
    to do when nothing is confirmed, then the receipts."""
    level = f"true count ({percent_at_least(miner.interval_level)}, all together)"
    floor = f"true count ≥ ({percent_at_least(1 - miner.alpha)}, all together)"
    table = Table(
        "rank",
        "itemset",
        "noisy count",
        level,
        floor,
        "noisy frequency",
        *(["confirmed"] if show_all else []),
        title=title,
    )
    for itemset in shown:
        interval = (
            "-"
            if itemset.count_low is None or itemset.count_high is None
            else f"[{itemset.count_low}, {itemset.count_high}]"
        )
        table.add_row(
            str(itemset.rank),
            escape(itemset.query or " & ".join(itemset.items)),
            "-" if itemset.noisy_count is None else str(itemset.noisy_count),
            interval,
            "-" if itemset.count_floor is None else str(max(itemset.count_floor, 0)),
            "-" if itemset.noisy_frequency is None else f"{itemset.noisy_frequency:.4f}",
            *([_yes_no(itemset.confirmed)] if show_all else []),
        )
    receipts = " | ".join(_receipt_line(receipt) for receipt in miner.receipts_)
    message = miner.nothing_confirmed()
    notes = [*miner.notes(), *([] if message is None else [message])]
    table.caption = "\n".join([*(escape(note) for note in notes), receipts])
    return table


def _yes_no(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def _serenade_options(
    operators: str, negations: bool, max_literals: int, thresholds: str
) -> SerenadeOptions:
    chosen = [op.strip() for op in operators.split(",") if op.strip()]
    if not chosen or any(op not in {"and", "or"} for op in chosen):
        raise _fail("--operators takes 'and', 'or' or 'and,or'")
    if thresholds not in {"auto", "continuous", "grid"}:
        raise _fail("--thresholds must be auto, continuous or grid")
    try:
        return SerenadeOptions.model_validate(
            {
                "operators": chosen,
                "negations": negations,
                "max_literals": max_literals,
                "threshold_mode": thresholds,
            }
        )
    except ValidationError as error:
        raise _fail(str(parameter_error(error))) from error


def _check_x0(x0: float | None, x0_fraction: float | None) -> None:
    """At most one of --x0 and --x0-fraction (ALGORITHMS.md §2.1: x0 is public)."""
    if x0 is not None and x0_fraction is not None:
        raise _fail(
            "give only one of --x0 (a support count, e.g. --x0 100) and --x0-fraction "
            "(a share of a noisy row count, e.g. --x0-fraction 0.05)"
        )


def _preset(text: str) -> Preset:
    if text not in {"auto", "paper"}:
        raise _fail(f"--preset must be 'auto' or 'paper', got {text!r}")
    return "auto" if text == "auto" else "paper"


def _split(text: str | None) -> tuple[float, float, float] | None:
    if text is None:
        return None
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise _fail(f"--split takes three numbers like 0.6,0.3,0.1, got {text!r}") from None
    if len(parts) != 3:
        raise _fail(f"--split takes three numbers like 0.6,0.3,0.1, got {text!r}")
    return parts[0], parts[1], parts[2]


def _run_serenade(
    ctx: typer.Context,
    dataset_id: str,
    miner: SerenadeES | SerenadeCS,
    plan_only: bool,
    output: Path | None,
    min_jaccard: float | None,
    show_all: bool = False,
    columns: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
) -> None:
    """Plan or mine; show the results that pass the noise-aware test (``--all``: every
    result), by J's lower end, each statistic with its joint interval, and how the run ended
    (``stop_reason_``: the chains that stopped early and why)."""
    options = _options(ctx)

    def action(connection: Connection) -> Any:
        dataset = connection.dataset(dataset_id)
        miner.columns = _column_names(columns, dataset.schema)
        miner.exclude = tuple(_column_names(exclude, dataset.schema) or ())
        return miner.plan(dataset) if plan_only else miner.mine(dataset)

    result = _run(options, action)
    if isinstance(result, Plan):
        _emit_plan(options, dataset_id, result)
        return
    if output is not None:
        (miner.to_csv if output.suffix == ".csv" else miner.to_json)(output, min_jaccard)
    verdict = miner.significance(min_jaccard)
    found = verdict.ranked if show_all else verdict.passed
    table = Table(
        "left",
        "right",
        "noisy |I| [joint]",
        "noisy J [joint]",
        "J − J_ind [joint]",
        "p-value [joint]",
        *(["passes"] if show_all else []),
        title=f"{type(miner).__name__} redescriptions"
        + ("" if show_all else " that pass the noise-aware test"),
    )
    for red in found:
        stats, joint = red.statistics, red.joint_intervals
        excess = red.noisy_excess
        table.add_row(
            escape(red.left),
            escape(red.right),
            format_with_interval(stats.support, joint.support, ".0f"),
            format_with_interval(stats.jaccard, joint.jaccard),
            "-" if excess is None else format_with_interval(excess, joint.excess),
            "-"
            if stats.p_value is None
            else format_with_interval(stats.p_value, joint.p_value, ".2g"),
            *([verdict_text(verdict.failed_checks(red))] if show_all else []),
        )
    message = miner.nothing_passed(min_jaccard)
    allowed = miner.columns_
    table.caption = (
        f"{verdict.summary.describe()}; {len(miner.receipts_)} charged calls, "
        f"{_miner_spent(miner)}; x0 = {miner.x0_:g}; thresholds: "
        f"{', '.join(sorted(set(miner.threshold_modes_)))}"
        + ("" if show_all else "; --all shows every result")
        + ("" if allowed is None else f"\nqueries drawn from the columns {', '.join(allowed)}")
        # nothing_passed() already ends with how the run ended
        + (f"\n{miner.stop_reason_}" if message is None else f"\n{message}")
    )
    payload = {
        "redescriptions": [
            {**r.to_dict(), **verdict_fields(verdict.failed_checks(r))} for r in found
        ],
        "significance": verdict.summary.as_dict(),
        "message": message,
        "stop_reason": miner.stop_reason_,
        "stopped": None if miner.stopped_ is None else miner.stopped_.describe(),
        "columns": allowed,
        "budget_spent": miner.budget_spent_,
    }
    _emit(options, payload, table)


def _emit_plan(options: _Options, dataset_id: str, plan: Plan) -> None:
    """The planned calls by operation and ε, with their ρ on a zCDP dataset; the caption gives
    the total and what remains in the dataset's unit, then the plan's report."""
    zcdp = plan.estimate.accounting == "zcdp"
    columns = ["operation", "calls", "ε each", *(["ρ each"] if zcdp else [])]
    table = Table(*columns, title=f"plan on {dataset_id}")
    counts: dict[tuple[str, str, str | None], int] = {}
    for call in plan.estimate.calls:
        key = (call.operation, call.epsilon_exact, call.rho_exact)
        counts[key] = counts.get(key, 0) + 1
    for (operation, epsilon, rho), number in counts.items():
        table.add_row(operation, str(number), epsilon_text(epsilon), *([rho or ""] if zcdp else []))
    if zcdp:
        table.caption = (
            f"total ρ={plan.estimate.total_rho_exact}; remaining "
            f"ρ={plan.estimate.remaining_rho_exact}; fits: {plan.fits}"
        )
    else:
        table.caption = (
            f"total ε={epsilon_text(plan.estimate.total_epsilon_exact)}; remaining "
            f"ε={epsilon_text(plan.estimate.remaining_epsilon)}; fits: {plan.fits}"
        )
    if isinstance(plan, SerenadePlan | TreePlan | ItemsetPlan):  # signal, floor and warnings
        table.caption += "\n" + plan.report()
    elif zcdp:  # each call's ρ and the (ε, δ) the run implies
        table.caption += "\n" + "\n".join(plan.rho_lines())
    _emit(options, plan.estimate, table)


X0Option = Annotated[
    float | None,
    typer.Option(
        help="Support centre x0 as a count (> 0); or give --x0-fraction", callback=_positive
    ),
]
X0FractionOption = Annotated[
    float | None,
    typer.Option(
        help="x0 as a fraction in (0, 1) of a noisy row count (bought first)", callback=_open_unit
    ),
]
SplitOption = Annotated[
    str | None, typer.Option(help="ε shares init,extend,quality (default: from the preset)")
]
PresetOption = Annotated[
    str,
    typer.Option(
        help="auto: I, K/τ, the split and x0/y0 chosen from ε, a noisy n and the schema so that "
        "every draw carries signal; paper: the paper's settings"
    ),
]
AllOption = Annotated[
    bool,
    typer.Option("--all", help="Show every result, not only those that pass the noise-aware test"),
]
OperatorsOption = Annotated[str, typer.Option(help="Extension operators: and, or or and,or")]
ThresholdOption = Annotated[str, typer.Option(help="Numeric thresholds: auto, continuous, grid")]
OutputOption = Annotated[Path | None, typer.Option(help="Write results to .json or .csv")]
PlanOption = Annotated[bool, typer.Option(help="Only price the run (free)")]
DisplayOption = Annotated[
    float | None,
    typer.Option(
        help="J threshold of the noise-aware test: J's lower end at least this (default: the "
        "run's, 0.3)",
        callback=_closed_unit,
    ),
]
InitialOption = Annotated[
    int | None, typer.Option(help="Initial pairs I (default: from the preset)", min=1)
]
MaxLiteralsOption = Annotated[int, typer.Option(help="Literals per query at most", min=1)]


@mine_app.command("serenade-es")
def mine_serenade_es(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    x0: X0Option = None,
    x0_fraction: X0FractionOption = None,
    preset: PresetOption = "auto",
    initial: InitialOption = None,
    rounds: Annotated[
        int | None, typer.Option(help="Extension rounds K (default: from the preset)", min=1)
    ] = None,
    split: SplitOption = None,
    operators: OperatorsOption = "and,or",
    negations: Annotated[bool, typer.Option(help="Allow negated literals")] = False,
    max_literals: MaxLiteralsOption = 4,
    thresholds: ThresholdOption = "auto",
    jaccard_quality: Annotated[bool, typer.Option(help="NoSens ablation: plain Jaccard")] = False,
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    min_jaccard: DisplayOption = None,
    show_all: AllOption = False,
    output: OutputOption = None,
    plan_only: PlanOption = False,
) -> None:
    """SerenadeES: I redescriptions grown together over K rounds."""
    _check_x0(x0, x0_fraction)
    _check_output(output, (".json", ".csv"))
    miner = SerenadeES(
        rounds=rounds,
        epsilon=_budget(epsilon, rho),
        rho=rho,
        preset=_preset(preset),
        split=_split(split),
        n_initial=initial,
        x0=x0,
        x0_fraction=x0_fraction,
        options=_serenade_options(operators, negations, max_literals, thresholds),
        quality_function="jaccard" if jaccard_quality else "serenade",
        progress=not plan_only,
    )
    _run_serenade(
        ctx, dataset_id, miner, plan_only, output, min_jaccard, show_all, columns, exclude
    )


@mine_app.command("serenade-cs")
def mine_serenade_cs(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    x0: X0Option = None,
    x0_fraction: X0FractionOption = None,
    preset: PresetOption = "auto",
    initial: InitialOption = None,
    tau: Annotated[
        int | None,
        typer.Option(help="Extension rounds per chain τ (default: from the preset)", min=1),
    ] = None,
    min_chain_jaccard: Annotated[
        float, typer.Option(help="J_min of the chains, in [0, 1]", callback=_closed_unit)
    ] = 0.3,
    split: SplitOption = None,
    operators: OperatorsOption = "and,or",
    negations: Annotated[bool, typer.Option(help="Allow negated literals")] = False,
    max_literals: MaxLiteralsOption = 4,
    thresholds: ThresholdOption = "auto",
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    min_jaccard: DisplayOption = None,
    show_all: AllOption = False,
    output: OutputOption = None,
    plan_only: PlanOption = False,
) -> None:
    """SerenadeCS: each initial pair extended alone for up to τ rounds."""
    _check_x0(x0, x0_fraction)
    _check_output(output, (".json", ".csv"))
    miner = SerenadeCS(
        tau=tau,
        min_jaccard=min_chain_jaccard,
        epsilon=_budget(epsilon, rho),
        rho=rho,
        preset=_preset(preset),
        split=_split(split),
        n_initial=initial,
        x0=x0,
        x0_fraction=x0_fraction,
        options=_serenade_options(operators, negations, max_literals, thresholds),
        progress=not plan_only,
    )
    _run_serenade(
        ctx, dataset_id, miner, plan_only, output, min_jaccard, show_all, columns, exclude
    )


# --------------------------------------------------------------------------------------------
# Tree-based miners (ALGORITHMS.md §3.7)

TreeMiner = AltExpM | AltMCMC | MCMCTreePair | DPLayeredTrees
DepthOption = Annotated[
    int | None,
    typer.Option(
        help="Split levels of every tree (default: 3, or the auto preset's choice)", min=1
    ),
]
TreePresetOption = Annotated[
    str,
    typer.Option(
        "--preset",
        help="paper (the default: the paper's split, ε/(InTr·(2·RMIter + 1)) a call) or auto "
        "(a noisy row count, then depth, rounds and the ε of trees and leaf counts chosen so that "
        "the results can pass the noise-aware test; options you give win)",
    ),
]
SettingOption = Annotated[
    str, typer.Option(help="standard (InTr 1, RMIter k) or stable (InTr k, RMIter 1)")
]
KOption = Annotated[
    int | None,
    typer.Option(
        "--k",
        help="k of the standard/stable setting (default 4; auto: its choice of rounds)",
        min=1,
    ),
]
InTreesOption = Annotated[
    int | None, typer.Option(help="InTr: initial trees (overrides --setting)", min=1)
]
RMIterOption = Annotated[
    int | None, typer.Option(help="RMIter: alternations per initial tree (overrides --setting)")
]
IterationsOption = Annotated[
    int,
    typer.Option(
        help=f"MCMC iterations per sampled tree, at least {MIN_TREE_ITERATIONS} (the server's "
        "public minimum: a shorter chain's release is far from DP)",
        callback=_chain_length(MIN_TREE_ITERATIONS),
    ),
]
TreeSamplerOption = Annotated[
    str,
    typer.Option(
        help="Sampler of every tree: exact (one exact draw from the chain's target by "
        "sum-product: pure ε-DP; refused when it does not fit the server's public work cap), "
        "mcmc (the chain: DP at convergence) or auto (exact wherever it fits, else the chain)"
    ),
]
SeedOption = Annotated[int | None, typer.Option(help="Seed of the (public) attribute draws")]
MinSupportOption = Annotated[
    float | None,
    typer.Option(help="Minimum noisy support of a result (default: 10, or the auto preset's)"),
]
MinJaccardOption = Annotated[
    float,
    typer.Option(
        help="Minimum noisy Jaccard of a result, and the J threshold of the noise-aware test "
        "(J's lower end at least this)"
    ),
]
PMaxOption = Annotated[float, typer.Option(help="Maximum noisy p-value of a result")]
BinsOption = Annotated[
    int | None, typer.Option(help="Bins of a numeric target attribute (server default if unset)")
]
PruneOption = Annotated[
    float | None, typer.Option(help="Show only noisy support I at least this (see --plot)")
]
MaxErrorOption = Annotated[
    float | None,
    typer.Option(
        help="Show only results whose noisy J has standard error at most this (public rule; "
        "0.07 recommended)",
        callback=_positive,
    ),
]
PairScoreOption = Annotated[
    str,
    typer.Option(
        help="The score of a tree pair: gain (the default: the Gini gain of the second tree "
        "on the first's leaves, no credit for a one-leaf first tree) or paper (g₁·(1 + g₂)/2)"
    ),
]
LeafReleaseOption = Annotated[
    str,
    typer.Option(
        help="How leaf counts are released: partition (one matrix at scale 1/ε, the default; "
        "the figures count exactly the printed queries' rows) or paper (intersections and left "
        "counts at 2/ε each; exact only when no row misses a value on the trees' paths)"
    ),
]
OutputsOption = Annotated[
    list[Path] | None,
    typer.Option("--output", help="Write results to .json or .csv (repeatable)"),
]
PlotOption = Annotated[
    Path | None, typer.Option(help="Save the noisy support/Jaccard plot (.png, .pdf, .svg)")
]


#: k of --setting when not given: the paper's RMIter 4 / InTr 4 (§3.7).
DEFAULT_K = 4


def _alternation_shape(
    setting: str, k: int | None, in_trees: int | None, rm_iterations: int | None, preset: str
) -> tuple[int, int | None]:
    """(InTr, RMIter) of --setting and --k (default 4), overridden by --in-trees /
    --rm-iterations. Under --preset auto the standard setting leaves RMIter to the preset
    unless --k or --rm-iterations gives it."""
    if setting not in {"standard", "stable"}:
        raise _fail("--setting must be 'standard' or 'stable'")
    chosen = k if k is not None else None if preset == "auto" else DEFAULT_K
    shape = (1, chosen) if setting == "standard" else (k or DEFAULT_K, 1)
    return (
        shape[0] if in_trees is None else in_trees,
        shape[1] if rm_iterations is None else rm_iterations,
    )


def _tree_parameters(
    budget: tuple[float | None, float | None],
    depth: int | None,
    min_support: float | None,
    min_jaccard: float,
    p_max: float,
    target_bins: int | None,
    seed: int | None,
    leaf_release: str,
    preset: str,
) -> TreeMinerParameters:
    if leaf_release not in get_args(LeafCountsRelease):
        raise _fail("--leaf-release must be 'partition' or 'paper'")
    epsilon, rho = budget
    return TreeMinerParameters(
        leaf_release=cast(LeafCountsRelease, leaf_release),
        preset=_preset(preset),
        epsilon=_budget(epsilon, rho),
        rho=rho,
        depth=depth,
        min_support=min_support,
        min_jaccard=min_jaccard,
        p_max=p_max,
        target_bins=target_bins,
        seed=seed,
    )


def _with_progress(parameters: TreeMinerParameters, progress: bool) -> TreeMinerParameters:
    return {**parameters, "progress": progress}


def _run_tree_miner(
    ctx: typer.Context,
    dataset_id: str,
    make: Callable[[bool], TreeMiner],
    plan_only: bool,
    outputs: list[Path] | None,
    plot: Path | None,
    prune: float | None,
    max_error: float | None = None,
    show_all: bool = False,
    columns: list[str] | None = None,
    exclude: list[str] | None = None,
) -> None:
    """Build the miner (``make(progress)``), restrict it to ``columns`` minus ``exclude``
    (--columns / --exclude, read against the schema), plan or mine it, then show the results
    that pass the noise-aware test (``show_all``: every result), by J's lower end, and write
    every result. ``prune`` (noisy support at least this) and ``max_error`` (standard error of noisy
    J at most this, the public rule of :meth:`~dpmine.miners.trees._TreeMinerBase.reliable`)
    narrow what is shown."""
    options = _options(ctx)
    for output in outputs or []:
        _check_output(output, (".json", ".csv"))
    _check_output(plot, option="--plot")
    try:
        miner = make(not plan_only and not options.as_json)
    except ValidationError as error:
        raise _fail(str(parameter_error(error))) from error
    except ValueError as error:
        raise _fail(str(error)) from error

    def action(connection: Connection) -> Any:
        dataset = connection.dataset(dataset_id)
        miner.columns = _column_names(columns, dataset.schema)
        miner.exclude = _column_names(exclude, dataset.schema)
        try:
            return miner.plan(dataset) if plan_only else miner.mine(dataset)
        except ValueError as error:
            if isinstance(error, ValidationError):
                raise
            raise _fail(str(error)) from error

    result = _run(options, action)
    if isinstance(result, Plan):
        _emit_plan(options, dataset_id, result)
        return
    for output in outputs or []:
        (miner.to_csv if output.suffix == ".csv" else miner.to_json)(output)
    if plot is not None:
        try:
            miner.save_plot(plot, prune)
        except ImportError as error:
            raise _fail(str(error)) from error
    verdict = miner.significance()
    found = verdict.ranked if show_all else verdict.passed
    if max_error is not None:
        found = [r for r in found if r.jaccard_error <= max_error]
    if prune is not None:
        found = [r for r in found if r.statistics.intersection >= prune]
    table = Table(
        "round",
        "left",
        "right",
        "noisy I [joint]",
        "noisy J ± s.e. [joint]",
        "J − J_ind [joint]",
        "p-value [joint]",
        *(["passes"] if show_all else []),
        title=f"{type(miner).__name__} redescriptions"
        + ("" if show_all else " that pass the noise-aware test"),
    )
    for red in found:
        stats, joint = red.statistics, red.joint_intervals
        jaccard = f"{stats.jaccard:.3f} ± {red.jaccard_error:.3f}"
        table.add_row(
            str(red.round),
            escape(red.left),
            escape(red.right),
            format_with_interval(stats.intersection, joint.support, ".0f"),
            f"{jaccard} [{joint.jaccard.low:.3f}, {joint.jaccard.high:.3f}]",
            format_with_interval(red.noisy_excess, joint.excess, ".3f"),
            format_with_interval(stats.p_value, joint.p_value, ".2g"),
            *([verdict_text(verdict.failed_checks(red))] if show_all else []),
        )
    kept = [f"noisy I ≥ {prune:g}"] if prune is not None else []
    kept += [f"s.e. of noisy J ≤ {max_error:g}"] if max_error is not None else []
    shown = f"; {len(found)} shown with {' and '.join(kept)}" if kept else ""
    message = miner.nothing_passed()
    stopped = miner.stopped_
    samplers = _tree_samplers(miner.receipts_)
    table.caption = (
        f"{verdict.summary.describe()}{shown}; from {len(miner.trees_)} tree pairs; "
        f"{len(miner.receipts_)} charged calls, {_miner_spent(miner)}"
        + ("" if show_all else "; --all shows every result")
        + ("" if message is None else f"\n{message}")
        + ("" if message is not None or stopped is None else f"\n{stopped.describe()}")
        + ("" if samplers is None else f"\n{_describe_samplers(samplers)}")
    )
    payload = {
        "miner": type(miner).__name__,
        **({} if samplers is None else {"tree_samplers": samplers}),
        "redescriptions": [tree_record(r, failed=verdict.failed_checks(r)) for r in found],
        "significance": verdict.summary.as_dict(),
        "message": message,
        "stopped": None if stopped is None else stopped.describe(),
        "budget_spent": miner.budget_spent_,
        "receipts": [receipt.model_dump(mode="json") for receipt in miner.receipts_],
    }
    _emit(options, payload, table)


def _tree_samplers(receipts: list[Receipt]) -> dict[str, int] | None:
    """How many ``tree.mcmc`` trees each sampler drew, from their receipts (None without
    any): the server labels such a release "pure" exactly when its exact sampler ran, else
    "approximate" (the chain)."""
    guarantees = [r.guarantee for r in receipts if r.operation == "tree.mcmc"]
    if not guarantees:
        return None
    exact = guarantees.count("pure")
    return {"exact": exact, "mcmc": len(guarantees) - exact}


def _describe_samplers(samplers: dict[str, int]) -> str:
    """One line: which sampler drew the trees, and the guarantee that follows."""
    exact, chain = samplers["exact"], samplers["mcmc"]
    parts = [f"{exact} drawn exactly (pure ε-DP)"] if exact else []
    parts += [f"{chain} by MCMC (approximate: ε-DP at convergence)"] if chain else []
    return f"trees: {' and '.join(parts)}"


@mine_app.command("alt-expm")
def mine_alt_expm(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    preset: TreePresetOption = "paper",
    setting: SettingOption = "standard",
    k: KOption = None,
    in_trees: InTreesOption = None,
    rm_iterations: RMIterOption = None,
    depth: DepthOption = None,
    seed: SeedOption = None,
    min_support: MinSupportOption = None,
    min_jaccard: MinJaccardOption = DEFAULT_MIN_JACCARD,
    p_max: PMaxOption = DEFAULT_P_MAX,
    target_bins: BinsOption = None,
    prune: PruneOption = None,
    max_jaccard_error: MaxErrorOption = None,
    show_all: AllOption = False,
    leaf_release: LeafReleaseOption = "partition",
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    output: OutputsOption = None,
    plot: PlotOption = None,
    plan_only: PlanOption = False,
) -> None:
    """AltExpM: trees alternated between the views, grown by the exponential mechanism."""
    shape = _alternation_shape(setting, k, in_trees, rm_iterations, preset)

    parameters = _tree_parameters(
        (epsilon, rho),
        depth,
        min_support,
        min_jaccard,
        p_max,
        target_bins,
        seed,
        leaf_release,
        preset,
    )

    def make(progress: bool) -> AltExpM:
        return AltExpM(
            in_trees=shape[0],
            rm_iterations=shape[1],
            **_with_progress(parameters, progress),
        )

    _run_tree_miner(
        ctx,
        dataset_id,
        make,
        plan_only,
        output,
        plot,
        prune,
        max_jaccard_error,
        show_all,
        columns,
        exclude,
    )


@mine_app.command("alt-mcmc")
def mine_alt_mcmc(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    preset: TreePresetOption = "paper",
    setting: SettingOption = "standard",
    k: KOption = None,
    in_trees: InTreesOption = None,
    rm_iterations: RMIterOption = None,
    iterations: IterationsOption = DEFAULT_TREE_ITERATIONS,
    sampler: TreeSamplerOption = "auto",
    depth: DepthOption = None,
    seed: SeedOption = None,
    min_support: MinSupportOption = None,
    min_jaccard: MinJaccardOption = DEFAULT_MIN_JACCARD,
    p_max: PMaxOption = DEFAULT_P_MAX,
    target_bins: BinsOption = None,
    prune: PruneOption = None,
    max_jaccard_error: MaxErrorOption = None,
    show_all: AllOption = False,
    leaf_release: LeafReleaseOption = "partition",
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    output: OutputsOption = None,
    plot: PlotOption = None,
    plan_only: PlanOption = False,
) -> None:
    """AltMCMC: trees alternated between the views, each drawn from the MCMC target: exactly
    (pure ε-DP) where the server's work bound fits, else by the chain (fixed iterations, DP at
    convergence); --sampler chooses, and the output says which sampler drew the trees."""
    if sampler not in get_args(TreeSampler):
        raise _fail("--sampler must be 'auto', 'exact' or 'mcmc'")
    shape = _alternation_shape(setting, k, in_trees, rm_iterations, preset)

    parameters = _tree_parameters(
        (epsilon, rho),
        depth,
        min_support,
        min_jaccard,
        p_max,
        target_bins,
        seed,
        leaf_release,
        preset,
    )

    def make(progress: bool) -> AltMCMC:
        return AltMCMC(
            in_trees=shape[0],
            rm_iterations=shape[1],
            iterations=iterations,
            sampler=cast(TreeSampler, sampler),
            **_with_progress(parameters, progress),
        )

    _run_tree_miner(
        ctx,
        dataset_id,
        make,
        plan_only,
        output,
        plot,
        prune,
        max_jaccard_error,
        show_all,
        columns,
        exclude,
    )


@mine_app.command("tree-pair")
def mine_tree_pair(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    preset: TreePresetOption = "paper",
    in_trees: Annotated[
        int | None,
        typer.Option(help="InTr: sampled tree pairs (default 4, or the auto preset's)", min=1),
    ] = None,
    omega: Annotated[
        float, typer.Option(help="ω: share of ε for sampling (0.1 standard, 0.5 balanced)")
    ] = 0.1,
    iterations: IterationsOption = DEFAULT_TREE_ITERATIONS,
    depth: DepthOption = None,
    seed: SeedOption = None,
    min_support: MinSupportOption = None,
    min_jaccard: MinJaccardOption = DEFAULT_MIN_JACCARD,
    p_max: PMaxOption = DEFAULT_P_MAX,
    target_bins: BinsOption = None,
    prune: PruneOption = None,
    max_jaccard_error: MaxErrorOption = None,
    show_all: AllOption = False,
    leaf_release: LeafReleaseOption = "partition",
    pair_score: PairScoreOption = "gain",
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    output: OutputsOption = None,
    plot: PlotOption = None,
    plan_only: PlanOption = False,
) -> None:
    """MCMCTreePair: InTr tree pairs sampled jointly by MCMC, then their noisy leaf counts."""
    if not 0 < omega < 1:
        raise _fail(f"--omega must be strictly between 0 and 1, got {omega:g}")
    if pair_score not in get_args(TreePairScore):
        raise _fail(f"--pair-score must be 'gain' or 'paper', got {pair_score!r}")

    parameters = _tree_parameters(
        (epsilon, rho),
        depth,
        min_support,
        min_jaccard,
        p_max,
        target_bins,
        seed,
        leaf_release,
        preset,
    )

    def make(progress: bool) -> MCMCTreePair:
        return MCMCTreePair(
            in_trees=in_trees,
            omega=omega,
            iterations=iterations,
            pair_score=cast(TreePairScore, pair_score),
            **_with_progress(parameters, progress),
        )

    _run_tree_miner(
        ctx,
        dataset_id,
        make,
        plan_only,
        output,
        plot,
        prune,
        max_jaccard_error,
        show_all,
        columns,
        exclude,
    )


@mine_app.command("layered")
def mine_layered(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    preset: Annotated[
        str,
        typer.Option(
            help="auto: seeds, layers, depth and the ε split chosen from ε, a noisy n and the "
            "schema, only each seed's last layer released for results; paper: 4 seeds of 4 "
            "layers at depth 3, ε split equally, every layer's release examined"
        ),
    ] = "auto",
    seeds: Annotated[
        int | None, typer.Option(help="Seeds per run (default: from the preset)", min=1)
    ] = None,
    layers: Annotated[
        int | None, typer.Option(help="Layers per seed (default: from the preset)", min=1)
    ] = None,
    depth: Annotated[
        int | None,
        typer.Option(help="Split levels of every tree (default: from the preset)", min=1),
    ] = None,
    seed_rule: Annotated[
        str,
        typer.Option(
            help="uniform: each seed a drawn one-literal query; expmech: each seed a private "
            "depth-1 tree on a drawn target of the other view (one more tree draw per seed)"
        ),
    ] = "uniform",
    query_rule: Annotated[
        str,
        typer.Option(
            help="majority: a layer's query is the new tree's leaves with noisy positive share "
            "above 1/2; jaccard: the leaves with the best noisy Jaccard with the target under "
            "the support bound"
        ),
    ] = "majority",
    final_release: Annotated[
        str,
        typer.Option(
            help="partition: each seed's last partition release is searched for results; pair "
            "(auto preset): every partition steers and each seed's last pair of queries gets "
            "one four-cell release, its only result"
        ),
    ] = "partition",
    seed: SeedOption = None,
    min_support: Annotated[
        float | None,
        typer.Option(help="Minimum noisy support of a result (default: from the preset)"),
    ] = None,
    min_jaccard: MinJaccardOption = DEFAULT_MIN_JACCARD,
    p_max: PMaxOption = DEFAULT_P_MAX,
    prune: PruneOption = None,
    max_jaccard_error: MaxErrorOption = None,
    show_all: AllOption = False,
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    output: OutputsOption = None,
    plot: PlotOption = None,
    plan_only: PlanOption = False,
) -> None:
    """DPLayeredTrees: from one-literal seeds, trees fitted layer by layer to the other
    side's query, alternating views."""
    chosen = _preset(preset)
    if seed_rule not in get_args(SeedRule):
        raise _fail(f"--seed-rule must be 'uniform' or 'expmech', got {seed_rule!r}")
    if query_rule not in get_args(QueryRule):
        raise _fail(f"--query-rule must be 'majority' or 'jaccard', got {query_rule!r}")
    if final_release not in get_args(FinalRelease):
        raise _fail(f"--final-release must be 'partition' or 'pair', got {final_release!r}")

    def make(progress: bool) -> DPLayeredTrees:
        return DPLayeredTrees(
            epsilon=_budget(epsilon, rho),
            rho=rho,
            preset=chosen,
            in_trees=seeds,
            layers=layers,
            depth=depth,
            seed_rule=cast(SeedRule, seed_rule),
            query_rule=cast(QueryRule, query_rule),
            final_release=cast(FinalRelease, final_release),
            min_support=min_support,
            min_jaccard=min_jaccard,
            p_max=p_max,
            seed=seed,
            progress=progress,
        )

    _run_tree_miner(
        ctx,
        dataset_id,
        make,
        plan_only,
        output,
        plot,
        prune,
        max_jaccard_error,
        show_all,
        columns,
        exclude,
    )


# --------------------------------------------------------------------------------------------
# DP Bayesian rule lists (ALGORITHMS.md §5)

fit_app = typer.Typer(
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Fit a private model (plan first with --plan-only; free).",
)
app.add_typer(fit_app, name="fit")
predict_app = typer.Typer(
    rich_markup_mode=None,
    no_args_is_help=True,
    help="Predict with a saved model on public rows (no server, free).",
)
app.add_typer(predict_app, name="predict")


def _numbers(text: str, count: int, option: str) -> tuple[float, ...]:
    """``count`` comma-separated numbers, e.g. ``1,1`` for --alpha."""
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise _fail(f"{option} takes {count} numbers like {','.join(['1'] * count)}") from None
    if len(parts) != count:
        raise _fail(f"{option} takes {count} numbers like {','.join(['1'] * count)}, got {text!r}")
    return parts


@fit_app.command("rule-list")
def fit_rule_list(
    ctx: typer.Context,
    dataset_id: Annotated[str, typer.Argument(metavar="DATASET")],
    epsilon: BudgetOption = None,
    rho: RhoOption = None,
    k_per_class: Annotated[
        int | None,
        typer.Option(
            help=f"K antecedents selected per class [default: {DEFAULT_K_PER_CLASS}, or all "
            "possible antecedents when the schema allows fewer]",
            min=1,
        ),
    ] = None,
    max_length: Annotated[
        int, typer.Option(help="L: items per antecedent at most", min=1)
    ] = DEFAULT_MAX_LENGTH,
    expected_length: Annotated[float, typer.Option(help="λ: prior mean list length")] = 3.0,
    expected_cardinality: Annotated[
        float, typer.Option(help="η: prior mean antecedent length")
    ] = 1.0,
    alpha: Annotated[str, typer.Option(help="α0,α1 of the Dirichlet prior")] = "1,1",
    iterations: Annotated[
        int,
        typer.Option(
            help=f"MCMC steps of the sampler, at least {MIN_RULE_LIST_ITERATIONS} (the server's "
            "public minimum: a shorter chain's release is far from DP)",
            callback=_chain_length(MIN_RULE_LIST_ITERATIONS),
        ),
    ] = DEFAULT_ITERATIONS,
    numeric_bins: Annotated[
        int, typer.Option(help="Equal-width public bins of a numeric attribute", min=2)
    ] = DEFAULT_NUMERIC_BINS,
    method: Annotated[str, typer.Option(help="Top-K selection: em or laplace")] = "em",
    target: Annotated[
        str,
        typer.Option(
            help="Sampler target: likelihood (prior as base measure) or posterior (the "
            "thesis' tempered posterior)"
        ),
    ] = "likelihood",
    sampler: Annotated[
        str,
        typer.Option(
            help="exact (every list of at most --max-rules rules, one exact draw: pure ε-DP), "
            "mcmc (lists of any length, DP at convergence) or auto (exact when it fits the "
            "server's public work cap)"
        ),
    ] = "auto",
    max_rules: Annotated[
        int,
        typer.Option(
            help=f"Exact sampler: lists of at most this many rules (1..{MAX_EXACT_RULES})",
            min=1,
            max=MAX_EXACT_RULES,
        ),
    ] = DEFAULT_MAX_RULES,
    split: Annotated[
        str, typer.Option(help="Relative ε weights antecedents,sampler,estimates")
    ] = "1,1,1",
    columns: ColumnsOption = None,
    exclude: ExcludeOption = None,
    output: Annotated[
        Path | None, typer.Option(help="Save the model (.json); predict with it offline")
    ] = None,
    plan_only: PlanOption = False,
) -> None:
    """A DP Bayesian rule list (DP-BRL): antecedents, a sampled list, noisy estimates; costs
    --epsilon in all (ε/3 each by default). The list is drawn exactly (pure ε-DP) when it fits,
    else by MCMC (DP at convergence); --sampler chooses."""
    options = _options(ctx)
    if method not in {"em", "laplace"}:
        raise _fail("--method must be 'em' or 'laplace'")
    if target not in {"likelihood", "posterior"}:
        raise _fail("--target must be 'likelihood' or 'posterior'")
    if sampler not in {"auto", "exact", "mcmc"}:
        raise _fail("--sampler must be 'auto', 'exact' or 'mcmc'")
    _check_output(output, (".json",))
    alpha_pair = _numbers(alpha, 2, "--alpha")
    weights = _numbers(split, 3, "--split")
    model = DPBayesianRuleList(
        epsilon=_budget(epsilon, rho),
        rho=rho,
        epsilon_split=None if len(set(weights)) == 1 else (weights[0], weights[1], weights[2]),
        k_per_class=k_per_class,
        max_length=max_length,
        expected_length=expected_length,
        expected_cardinality=expected_cardinality,
        alpha=(alpha_pair[0], alpha_pair[1]),
        iterations=iterations,
        numeric_bins=numeric_bins,
        method="em" if method == "em" else "laplace",
        target="likelihood" if target == "likelihood" else "posterior",
        sampler="exact" if sampler == "exact" else "mcmc" if sampler == "mcmc" else "auto",
        max_rules=max_rules,
        progress=not plan_only and not options.as_json,
    )

    def action(connection: Connection) -> Any:
        dataset = connection.dataset(dataset_id)
        model.set_params(
            columns=_column_names(columns, dataset.schema),
            exclude=tuple(_column_names(exclude, dataset.schema) or ()),
        )
        try:
            return model.plan(dataset) if plan_only else model.fit(dataset)
        except ValueError as error:
            if isinstance(error, ValidationError):
                raise
            raise _fail(str(error)) from error

    result = _run(options, action)
    if isinstance(result, Plan):
        _emit_plan(options, dataset_id, result)
        return
    if output is not None:
        model.to_json(output)
    if options.as_json:
        typer.echo(json.dumps(model.to_dict(), indent=2))
        return
    console.print(escape(model.rule_list_.to_text()), soft_wrap=True)
    console.print(
        f"{len(model.rule_list_)} rules over {len(model.antecedents_)} antecedents; "
        f"{_spent(model.receipts_)}"
    )
    if model.sampler_ == "exact":
        how = f"drawn exactly among the lists of at most {model.max_rules} rules (pure ε-DP)"
    else:
        how = f"sampled by MCMC, {model.iterations_} steps (approximate: ε-DP at convergence)"
    console.print(f"rule list {how}")
    allowed = model.columns_for(model.rule_list_.schema)
    if allowed is not None:
        console.print(escape(f"antecedents drawn from the columns {', '.join(allowed)}"))
    for receipt in model.receipts_:
        console.print(escape(f"{receipt.operation}: {_receipt_line(receipt)}"), soft_wrap=True)
    if output is not None:
        console.print(f"model saved to {escape(str(output))}")


def _read_rows(path: Path) -> dict[str, list[str]]:
    """A UTF-8 CSV file with a header as columns of cell texts (as the server reads its files);
    a mistake names the file and, for bad bytes, the line."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise _fail(f"cannot read {str(path)!r}: {error.strerror or error}") from error
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise _fail(
            f"{str(path)!r} line {line} is not UTF-8 text (byte 0x{raw[error.start]:02x}); "
            "save the file as UTF-8"
        ) from error
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = [name.strip() for name in next(reader, [])]
        columns: dict[str, list[str]] = {name: [] for name in header}
        for row in reader:
            for name, cell in zip(header, row + [""] * (len(header) - len(row)), strict=False):
                columns[name].append(cell)
    except csv.Error as error:
        raise _fail(f"cannot read {str(path)!r} line {reader.line_num}: {error}") from error
    if not header:
        raise _fail(f"{str(path)!r} is empty: it needs a header row and at least one row")
    if not any(columns.values()):
        raise _fail(f"{str(path)!r} has a header but no rows to predict")
    return columns


@predict_app.command("rule-list")
def predict_rule_list(
    ctx: typer.Context,
    model_path: Annotated[Path, typer.Argument(metavar="MODEL.json")],
    rows_path: Annotated[Path, typer.Argument(metavar="ROWS.csv")],
    threshold: Annotated[
        float, typer.Option(help="Predict positive above this, in [0, 1]", callback=_closed_unit)
    ] = 0.5,
    output: Annotated[Path | None, typer.Option(help="Write the predictions to a .csv")] = None,
) -> None:
    """Predict with a rule list saved by ``fit rule-list --output``: one line per row with the
    capturing rule, P(positive) and the predicted class. Offline and free."""
    options = _options(ctx)
    _check_output(output, (".csv",))
    try:
        rule_list = RuleList.from_json(model_path)
    except (OSError, ValueError, KeyError) as error:
        raise _fail(f"cannot load the model {str(model_path)!r}: {error}") from error
    columns = _read_rows(rows_path)
    try:
        captured = rule_list.capture(columns)
    except ValueError as error:
        raise _fail(str(error)) from error
    estimates = [r.estimate for r in (*rule_list.rules, rule_list.default)]
    negative, positive = rule_list.classes
    header = ["rule", f"p_{positive}", "prediction"]
    lines = [
        [
            "default" if j == len(rule_list) else str(j + 1),
            f"{estimates[j]:.6g}",
            positive if estimates[j] > threshold else negative,
        ]
        for j in (int(x) for x in captured)
    ]
    if options.as_json:
        typer.echo(json.dumps([dict(zip(header, line, strict=True)) for line in lines], indent=2))
    elif output is None:
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([header, *lines])
        typer.echo(text.getvalue(), nl=False)
    if output is not None:
        with output.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(lines)
        if not options.as_json:
            console.print(f"{len(lines)} predictions written to {escape(str(output))}")


def main() -> None:
    """Entry point of ``dpmine``."""
    app()
