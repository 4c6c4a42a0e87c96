"""No public failure mode follows a charge (issue #7; DESIGN.md contract item 5).

Every operation of the catalog is driven through the real executor (validate → price → charge →
load → run) with a matrix of edge cases: extreme and invalid parameters, empty and zero-support
queries, degenerate numeric literals (lower == upper, bounds far outside the public range),
one-category and all-missing attributes, numeric-only views, and datasets with 0 or 1 rows.
Each request must either be refused before the charge (InvalidRequest, no ledger entry) or
return its release; an OperationFailed after the charge would tell the analyst one bit about
the data for the price of the call.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, select

from dpmine.wire import (
    MIN_RULE_LIST_ITERATIONS,
    MIN_TREE_ITERATIONS,
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetKind,
    DatasetMetadata,
    FimiSource,
    LabelSpec,
    NumericAttribute,
)
from dpmine_server.db.models import LedgerEntry, Principal
from dpmine_server.errors import InvalidRequest, OperationFailed
from dpmine_server.operations import CATALOG
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import StoredFile
from dpmine_server.services.principals import create_principal, get_principal
from support.inprocess import settings_for

#: Requests per (operation, dataset), drawn from the full edge-case matrix with a fixed seed.
PER_DATASET = 40
EPSILONS = (1e-9, 0.05, 1.0, 1000.0)
MISSING = "?"


@dataclass(frozen=True)
class Case:
    """A registered dataset: its id, public metadata and CSV or FIMI content."""

    id: str
    metadata: DatasetMetadata
    content: str
    fimi: bool = False


def _csv(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join(",".join(cells) for cells in [header, *rows]) + "\n"


def _attributes(kind: DatasetKind) -> list[AnyAttribute]:
    left, right = ("left", "right") if kind == "views" else (None, None)
    return [
        BooleanAttribute(name="b1", view=left),
        CategoricalAttribute(name="one", view=left, categories=["only"]),
        NumericAttribute(name="n1", view=left, lo=0.0, hi=1.0, grid=[0.5]),
        BooleanAttribute(name="gone", view=left),  # every value missing
        BooleanAttribute(name="b2", view=right),
        CategoricalAttribute(name="c2", view=right, categories=["x", "y", "z"]),
        NumericAttribute(name="n2", view=right, lo=-1e6, hi=1e6),
    ]


HEADER = ("b1", "one", "n1", "gone", "b2", "c2", "n2")
ROWS = (
    ("1", "only", "0.25", MISSING, "0", "x", "5"),
    ("0", MISSING, "7", MISSING, "1", "y", "-3e9"),
    (MISSING, "only", "0.5", MISSING, "1", MISSING, MISSING),
)


def _cases() -> list[Case]:
    cases: list[Case] = []
    # Labels for the rule lists (§5): categorical on the views, Boolean on the tables.
    labels = {
        "views": LabelSpec(attribute="c2", positive="x"),
        "table": LabelSpec(attribute="b2", positive="1"),
    }
    # No header-only CSV case: registration refuses a file without rows with a message that
    # says so (tests/data/test_loaders.py), so no CSV dataset can be empty; FIMI files can be
    # (the tx-empty case below), and the one-row cases leave a class or a view cell empty.
    for kind in ("views", "table"):
        for rows, n_max, suffix in ((ROWS, 5, "full"), (ROWS[:1], 1, "one")):
            metadata = DatasetMetadata(
                kind=kind, n_max=n_max, attributes=_attributes(kind), label=labels[kind]
            )
            cases.append(Case(f"{kind}-{suffix}", metadata, _csv(HEADER, rows)))
    numeric_only = DatasetMetadata(
        kind="views",
        n_max=4,
        attributes=[
            NumericAttribute(name="l", view="left", lo=-1.0, hi=1.0),
            NumericAttribute(name="r", view="right", lo=5.0, hi=6.0, grid=[5.5]),
        ],
    )
    cases.append(Case("numeric-only", numeric_only, _csv(("l", "r"), [("0", "5.5"), ("?", "?")])))
    for name, attribute in (
        ("single-bool", BooleanAttribute(name="only")),
        ("single-num", NumericAttribute(name="only", lo=0.0, hi=2.0)),
    ):
        metadata = DatasetMetadata(kind="table", n_max=3, attributes=[attribute])
        cases.append(Case(f"table-{name}", metadata, _csv(("only",), [("1",), ("?",)])))
    all_missing = DatasetMetadata(
        kind="views",
        n_max=3,
        attributes=[
            CategoricalAttribute(name="l", view="left", categories=["p"]),
            BooleanAttribute(name="r", view="right"),
        ],
    )
    cases.append(Case("all-missing", all_missing, _csv(("l", "r"), [("?", "?"), ("?", "?")])))
    for items, lines, n_max, suffix in (
        (["a", "b", "c"], "a b\nb c\na b c\n", 5, "full"),
        (["a"], "a\n", 1, "one"),
        (["a", "b"], "", 2, "empty"),
    ):
        metadata = DatasetMetadata(kind="transactions", n_max=n_max, items=items)
        cases.append(Case(f"tx-{suffix}", metadata, lines, fimi=True))
    # A public schema too wide to mine 3-itemsets within the work cap (rows of up to 3,000
    # items on a million rows), whatever the few rows it holds.
    wide = DatasetMetadata(
        kind="transactions", n_max=1_000_000, items=[f"w{i}" for i in range(3_000)]
    )
    cases.append(Case("tx-wide", wide, "w1 w2\nw2 w3\n", fimi=True))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Services, Principal]]:
    """Test-mode services with every case registered and a huge grant for ``alice``."""
    folder = tmp_path_factory.mktemp("no-failure-after-charge")
    settings = settings_for(
        folder,
        database_file="dpmine.sqlite3",
        owner_key="owner-key-0123456789-abcdefgh",
        secret_key="no-failure-after-charge-secret-0123456789",
        test_seed=7,
        job_workers=1,
    )
    services = build_services(settings)
    try:
        with services.write_sessions() as session, session.begin():
            create_principal(session, name="alice", role="analyst", secret=settings.secret_key)
        for case in CASES:
            path = folder / f"{case.id}.{'dat' if case.fimi else 'csv'}"
            path.write_text(case.content, encoding="utf-8")
            source = FimiSource(path=path.name) if case.fimi else CsvSource(path=path.name)
            request = CreateDatasetRequest(
                id=case.id,
                name=case.id,
                epsilon_cap=1_000_000.0,
                metadata=case.metadata,
                source=source,
            )
            with services.write_sessions() as session, session.begin():
                services.datasets.register(
                    session, request, files={"path": StoredFile(path, path.name)}
                )
                services.datasets.set_grant(session, case.id, "alice", 1_000_000.0)
        with services.sessions() as session:
            alice = get_principal(session, "alice")
            session.expunge(alice)
        yield services, alice
    finally:
        services.close()


# -- the edge-case matrix ---------------------------------------------------------------------


def _literals(
    metadata: DatasetMetadata, view: str | None = None, *, valid: bool = False
) -> list[dict[str, Any]]:
    """Every literal shape of the attributes (of one view): both polarities, every category,
    degenerate numeric bounds and, unless ``valid``, an undeclared category and bounds outside
    the public range."""
    if metadata.kind == "transactions":
        names = [*metadata.items, "not-an-item"]
        return [{"kind": "bool", "attribute": n, "negated": neg} for n in names for neg in (0, 1)]
    literals: list[dict[str, Any]] = []
    for attribute in metadata.attributes:
        if view is not None and attribute.view not in (view, None):
            continue
        name = attribute.name
        for negated in (False, True):
            base = {"attribute": name, "negated": negated}
            if isinstance(attribute, BooleanAttribute):
                literals.append({"kind": "bool", **base})
            elif isinstance(attribute, CategoricalAttribute):
                for category in [*attribute.categories, *([] if valid else ["undeclared"])]:
                    literals.append({"kind": "cat", "category": category, **base})
            else:
                lo, hi = attribute.lo, attribute.hi
                for lower, upper in (
                    (lo, hi),
                    (lo, lo),
                    (hi, hi),
                    (None, lo),
                    (hi, None),
                    (-1e300, 1e300),
                    (hi + 1.0, hi + 2.0),
                    ((lo + hi) / 2, (lo + hi) / 2),
                ):
                    if valid and (lower, upper) in {(-1e300, 1e300), (hi + 1.0, hi + 2.0)}:
                        continue
                    literals.append({"kind": "num", "lower": lower, "upper": upper, **base})
    return literals


def _expressions(literals: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Single literals plus random conjunctions, disjunctions and complements (some empty)."""
    if not literals:
        return []
    exprs = list(literals)
    for _ in range(8):
        a, b = rng.choice(literals), rng.choice(literals)
        exprs.append({"kind": "and", "terms": [a, b]})
        exprs.append({"kind": "or", "terms": [a, b]})
        exprs.append({"kind": "not", "term": a})
        exprs.append({"kind": "and", "terms": [a, {"kind": "not", "term": a}]})  # empty support
    return exprs


def _serenade(first: dict[str, Any], steps: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    expr = first
    for op, literal in steps:
        expr = {"kind": op, "terms": [expr, literal]}
    return expr


def _redescriptions(metadata: DatasetMetadata, rng: random.Random) -> list[dict[str, Any]]:
    if metadata.kind == "transactions":
        return []
    views = metadata.kind == "views"
    reds = []
    for _ in range(30):
        valid = rng.random() < 0.9
        lefts = _literals(metadata, "left" if views else None, valid=valid)
        rights = _literals(metadata, "right" if views else None, valid=valid)
        left = rng.choice(lefts)
        right = rng.choice(rights)
        if rng.random() < 0.4:
            left = _serenade(left, [(rng.choice(["and", "or"]), rng.choice(lefts))])
        if rng.random() < 0.2:
            steps = [(rng.choice(["and", "or"]), rng.choice(rights)) for _ in range(3)]
            right = _serenade(right, steps)
        reds.append({"left": left, "right": right})
    return reds


def _quality(metadata: DatasetMetadata, rng: random.Random) -> dict[str, Any]:
    x0 = rng.choice([1e-9, 0.5, 1.0, metadata.n_max - 1e-9, metadata.n_max, 1e9])
    quality: dict[str, Any] = {"x0": x0, "function": rng.choice(["serenade", "jaccard"])}
    if rng.random() < 0.5:
        quality["s"] = rng.choice([1e-9, 0.01, 10.0])
    return quality


def _options(rng: random.Random) -> dict[str, Any]:
    return {
        "operators": rng.choice([["and"], ["or"], ["and", "or"]]),
        "negations": rng.random() < 0.5,
        "max_literals": rng.choice([1, 2, 16]),
        "single_side_or": rng.random() < 0.5,
        "threshold_mode": rng.choice(["auto", "continuous", "grid"]),
    }


def _tree_split(attribute: AnyAttribute, rng: random.Random) -> dict[str, Any]:
    """A split on ``attribute``: lattice end points and mid-point, or an invalid threshold."""
    if isinstance(attribute, NumericAttribute):
        middle = attribute.lo / 2 + attribute.hi / 2
        return {
            "attribute": attribute.name,
            "threshold": rng.choice([attribute.lo, attribute.hi, middle, 0.3]),
        }
    if isinstance(attribute, CategoricalAttribute):
        return {"attribute": attribute.name, "category": rng.choice([*attribute.categories, "no"])}
    return {"attribute": attribute.name}


def _tree(metadata: DatasetMetadata, view: str, rng: random.Random) -> dict[str, Any]:
    """A random tree of depth 1 or 2 on ``view`` (often invalid: repeats, wrong types)."""
    attributes = [a for a in metadata.attributes if a.view == view] or list(metadata.attributes)
    depth = rng.choice([1, 1, 2])
    splits = [
        _tree_split(rng.choice(attributes), rng) if attributes else {"attribute": "x"}
        for _ in range(2**depth - 1)
    ]
    return {"view": view, "depth": depth, "splits": splits}


def _tree_request(
    operation: str, metadata: DatasetMetadata, epsilon: float, rng: random.Random
) -> dict[str, Any]:
    """A request of a tree operation (§3) with edge-case depths, targets and iterations."""
    names = [a.name for a in metadata.attributes] or ["x"]
    if operation == "tree.leaf_counts":
        left, right = _tree(metadata, "left", rng), _tree(metadata, "right", rng)
        return {"left_tree": left, "right_tree": right, "epsilon": epsilon}
    common = {"depth": rng.choice([1, 2, 3, 6]), "epsilon": epsilon}
    if operation != "tree.expmech":
        # below the public minimum (refused before the charge), at it, and above
        common["iterations"] = rng.choice([1, MIN_TREE_ITERATIONS, MIN_TREE_ITERATIONS + 7])
    if operation == "tree.pair_mcmc":
        return {"attribute": rng.choice(names), **common}
    view = rng.choice(["left", "right"])
    target = rng.choice(
        [
            {"kind": "attribute", "attribute": rng.choice(names), "bins": rng.choice([None, 2])},
            {"kind": "tree", "tree": _tree(metadata, "left" if view == "right" else "right", rng)},
        ]
    )
    return {"view": view, "target": target, **common}


def _antecedents(metadata: DatasetMetadata, rng: random.Random) -> list[dict[str, Any]]:
    """0–3 antecedents of 1–3 literals on distinct attributes (some invalid: undeclared
    categories, bounds outside the range, the label's attribute)."""
    literals = _literals(metadata, valid=rng.random() < 0.8)
    antecedents = []
    for _ in range(rng.choice([0, 1, 2, 3])):
        chosen: dict[str, dict[str, Any]] = {}
        for literal in rng.sample(literals, k=min(len(literals), rng.choice([1, 2, 3]))):
            chosen.setdefault(literal["attribute"], literal)
        antecedents.append({"items": list(chosen.values())})
    return [a for i, a in enumerate(antecedents) if a not in antecedents[:i]]


def _rule_list_request(
    operation: str, metadata: DatasetMetadata, epsilon: float, rng: random.Random
) -> dict[str, Any]:
    """A request of a rule-list operation (§5) with edge-case parameters."""
    if operation == "brl.antecedents":
        return {
            "k_per_class": rng.choice([1, 2, 5, 40]),  # 40 exceeds some universes
            "max_length": rng.choice([1, 2, 3]),
            "epsilon": epsilon,
            "method": rng.choice(["em", "laplace"]),
            "rho": rng.choice([1e-300, 0.1, 0.999999]),
            "numeric_bins": rng.choice([2, 4, 64]),
        }
    rules = _antecedents(metadata, rng)
    if operation == "brl.point_estimates":
        return {"rules": rules, "epsilon": epsilon}
    if not rules:  # the sampler needs at least one antecedent
        valid = _literals(metadata, valid=True)
        rules = [{"items": [valid[0]]}] if valid else []
    extreme = [1e-6, 1.0, 1e6]
    request: dict[str, Any] = {
        "antecedents": rules,
        "epsilon": epsilon,
        "expected_length": rng.choice(extreme),
        "expected_cardinality": rng.choice(extreme),
        "alpha_negative": rng.choice(extreme),
        "alpha_positive": rng.choice(extreme),
        "target": rng.choice(["likelihood", "posterior"]),
    }
    if operation == "brl.sample_rule_list_exact":
        request["max_rules"] = rng.choice([0, 1, 3, 4, 5])  # 0 and 5 are refused
        return request
    request["iterations"] = rng.choice([1, MIN_RULE_LIST_ITERATIONS, MIN_RULE_LIST_ITERATIONS + 7])
    if rules and rng.random() < 0.2:  # the removed start list: refused before the charge
        request["initial"] = rng.sample(range(len(rules)), k=rng.randint(0, len(rules)))
    return request


def _requests(operation: str, metadata: DatasetMetadata, seed: int) -> Iterator[dict[str, Any]]:
    """PER_DATASET requests for ``operation`` on a dataset with ``metadata``."""
    rng = random.Random(seed)
    exprs = _expressions(_literals(metadata), rng)
    reds = _redescriptions(metadata, rng)
    for _ in range(PER_DATASET):
        epsilon = rng.choice(EPSILONS)
        if operation == "count.noisy":
            yield {"epsilon": epsilon, "predicate": rng.choice([None, *exprs])}
        elif operation == "red.compute_quality":
            if reds:
                mode = rng.choice(["cells", "paper"])
                yield {"epsilon": epsilon, "redescription": rng.choice(reds), "mode": mode}
            else:
                yield {"epsilon": epsilon, "redescription": {"left": exprs[0], "right": exprs[1]}}
        elif operation == "serenade.initial_pairs":
            yield {
                "epsilon": epsilon,
                "count": rng.choice([1, 2, 12]),
                "quality": _quality(metadata, rng),
                "options": _options(rng),
            }
        elif operation.startswith("tree."):
            yield _tree_request(operation, metadata, epsilon, rng)
        elif operation.startswith("brl."):
            yield _rule_list_request(operation, metadata, epsilon, rng)
        elif operation == "serenade.extend_one":
            collection = rng.sample(reds, k=min(len(reds), rng.choice([1, 3]))) or [
                {"left": exprs[0], "right": exprs[1]}
            ]
            yield {
                "mode": "cs" if len(collection) == 1 and rng.random() < 0.5 else "es",
                "epsilon": epsilon,
                "collection": collection,
                "quality": _quality(metadata, rng),
                "options": _options(rng),
            }
        else:
            low = rng.choice([1, 2, 3, 6])
            yield {
                "k": rng.choice([1, 2, 5, 1000]),
                "min_length": low,
                "max_length": rng.choice([None, low, min(low + 1, 6)]),
                "epsilon": epsilon,
                "rho": rng.choice([1e-300, 0.1, 0.999999]),
                "with_counts": rng.random() < 0.7,
                "count_share": rng.choice([1e-6, 0.5, 0.999999]),
            }


def _entries(services: Services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)


@pytest.mark.parametrize("operation", sorted(CATALOG))
def test_every_request_is_refused_before_the_charge_or_released(
    engine: tuple[Services, Principal], operation: str
) -> None:
    services, alice = engine
    spec = CATALOG[operation]
    outcomes = {"refused": 0, "released": 0}
    failures: list[str] = []
    for number, case in enumerate(CASES):
        for request in _requests(operation, case.metadata, seed=number * 7919 + len(operation)):
            before = _entries(services)
            try:
                release = services.executor.execute(
                    principal=alice,
                    dataset_id=case.id,
                    spec=spec,
                    request=request,
                    idempotency_key=None,
                )
            except InvalidRequest:
                assert _entries(services) == before, (case.id, request)
                outcomes["refused"] += 1
                continue
            except OperationFailed:
                failures.append(f"{case.id}: {request}")
                continue
            assert not release.replayed
            assert _entries(services) == before + 1
            outcomes["released"] += 1
    assert not failures, f"{len(failures)} failed after the charge:\n" + "\n".join(failures[:10])
    assert outcomes["released"] >= PER_DATASET, outcomes  # the matrix is not all refusals


@pytest.mark.parametrize("operation", ["fim.topk_em", "fim.topk_laplace"])
def test_a_request_past_the_work_cap_is_refused_before_the_charge(
    engine: tuple[Services, Principal], operation: str
) -> None:
    """The itemset plan's public bound (n_max · Σ C(w, ℓ) scan steps) exceeds the server's cap:
    refused by validation, with what to change, and nothing is charged (issue #20)."""
    services, alice = engine
    before = _entries(services)
    with pytest.raises(InvalidRequest, match="max_row_width"):
        services.executor.execute(
            principal=alice,
            dataset_id="tx-wide",
            spec=CATALOG[operation],
            request={"k": 5, "min_length": 3, "epsilon": 1.0},
            idempotency_key=None,
        )
    assert _entries(services) == before
    release = services.executor.execute(
        principal=alice,
        dataset_id="tx-wide",
        spec=CATALOG[operation],
        request={"k": 5, "min_length": 1, "epsilon": 1.0},
        idempotency_key=None,
    )
    assert len(release.body["itemsets"]) == 5
    assert _entries(services) == before + 1


def test_the_matrix_covers_every_catalog_operation() -> None:
    # A new operation gets requests here (else the generic branch builds itemset requests,
    # which its request model would refuse, and the test above would only see refusals).
    known = {
        "count.noisy",
        "red.compute_quality",
        "serenade.initial_pairs",
        "serenade.extend_one",
        "fim.topk_em",
        "fim.topk_laplace",
        "tree.expmech",
        "tree.mcmc",
        "tree.pair_mcmc",
        "tree.leaf_counts",
        "brl.antecedents",
        "brl.sample_rule_list",
        "brl.sample_rule_list_exact",
        "brl.point_estimates",
    }
    assert set(CATALOG) == known
