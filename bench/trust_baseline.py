"""The baseline side of ``bench_trust.py --baseline``: a baseline commit's miners, run by its own
client against its own server, and what they printed by default.

``bench_trust.py`` starts a server on the baseline's code and runs this script as::

    PYTHONPATH=<baseline>/client:<baseline>/server python bench/trust_baseline.py REQUEST RESULT

REQUEST (JSON) names the server (url, owner key), the tables (id, title, folder holding the
``left.csv``/``right.csv`` the harness wrote) and the runs (table, miner, ε, repetition, seed).
As the owner, the script proposes each table's metadata with the *baseline's*
``propose_metadata`` on those files, takes the proposal as is, registers the pair and grants
an analyst; as that analyst it runs each miner at the baseline's defaults. RESULT (JSON) holds,
per run, the default output of the baseline, i.e. what ``dpmine mine …`` printed without
display options at f614ac4 (``redescriptions_``: Serenade's measured collection, the tree
miners' results after their noisy min_support/min_jaccard/p_max filter), each result's query
texts (the ``left``/``right`` properties, as its ``to_json`` wrote them) and noisy figures, the
parameters the miner used, and where ``dpmine``/``dpmine_server`` were imported from.

Only the baseline's packages are imported, through :mod:`importlib`: mypy checks this file
against today's code, whose miner API differs, so the baseline's objects are typed ``Any``.
Nothing is judged here; ``bench_trust.py`` evaluates the texts on the exact data.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SERENADE = ("SerenadeCS", "SerenadeES")
TREES = ("AltExpM", "AltMCMC", "MCMCTreePair")
CLIENT_TIMEOUT_S = 1800.0


def _module(name: str) -> Any:
    return importlib.import_module(name)


def _plain(value: Any) -> Any:
    """A JSON-able copy of a parameter value (dataclasses and pydantic models included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def register(owner: Any, table: dict[str, Any]) -> dict[str, Any]:
    """Propose (baseline code), confirm as proposed and upload one CSV pair; returns the
    registered metadata's attributes (name, type, view) for the harness to compare."""
    wire = _module("dpmine.wire")
    propose = _module("dpmine_server.data.propose").propose_metadata
    folder = Path(table["folder"])
    source = wire.CsvPairSource(left="left.csv", right="right.csv", id_column="id")
    metadata = propose(source, kind="views", base_dir=folder)
    if metadata.review is not None:  # the owner takes the proposal as is
        review = metadata.review.model_copy(update={"reviewed": True})
        metadata = metadata.model_copy(update={"review": review})
    request = wire.CreateDatasetRequest(
        id=table["id"],
        name=table["title"],
        epsilon_cap=1_000_000.0,
        metadata=metadata,
        source=source,
    )
    owner.admin.upload_dataset(
        request, {"left": folder / "left.csv", "right": folder / "right.csv"}
    )
    dumped = metadata.model_dump(mode="json")
    return {
        "attributes": [
            {"name": a["name"], "type": a["type"], "view": a.get("view")}
            for a in dumped["attributes"]
        ],
        "missing_values": dumped.get("missing_values"),
    }


def make_miner(name: str, epsilon: float, seed: int) -> Any:
    """The miner at the baseline's defaults (those of its CLI too): Serenade's ``auto`` preset,
    the tree miners' standard setting with the run's seed for the public attribute draws."""
    miners = _module("dpmine.miners")
    if name in SERENADE:
        return getattr(miners, name)(epsilon=epsilon)
    if name in TREES:
        return getattr(miners, name)(epsilon=epsilon, seed=seed)
    raise ValueError(f"unknown miner {name}")


def parameters_of(miner: Any) -> dict[str, Any]:
    """The parameters the miner ran with: its public attributes and, for Serenade, the
    settings its preset filled in (``settings_``)."""
    given = {
        key: _plain(value)
        for key, value in vars(miner).items()
        if not key.startswith("_") and not key.endswith("_") and key != "progress"
    }
    settings = getattr(miner, "settings_", None)
    if settings is not None:
        given["settings_"] = _plain(settings)
    return given


def result_of(name: str, red: Any) -> dict[str, Any]:
    """One printed result: its query texts and the noisy figures the baseline showed."""
    stats = red.statistics
    record: dict[str, Any] = {
        "left": red.left,
        "right": red.right,
        "noisy_jaccard": stats.jaccard,
        "noisy_support": stats.intersection if name in TREES else stats.support,
        "noisy_p_value": stats.p_value,
    }
    if name in TREES:
        record["round"] = red.round
    return record


def one_run(handle: Any, job: dict[str, Any]) -> dict[str, Any]:
    """One ``mine()`` and its default output; a failure is recorded, not raised."""
    record: dict[str, Any] = {key: job[key] for key in ("table", "miner", "epsilon", "repetition")}
    start = time.perf_counter()
    try:
        miner = make_miner(job["miner"], job["epsilon"], job["seed"])
        miner.mine(handle)
        record["wall_s"] = round(time.perf_counter() - start, 3)
        shown = list(miner.redescriptions_)
        record.update(
            status="ok",
            results=[result_of(job["miner"], red) for red in shown],
            epsilon_spent=miner.budget_spent_,
            parameters=parameters_of(miner),
            error="",
        )
    except Exception as error:  # recorded and reported by the harness; the runs go on
        record.update(
            status="failed",
            wall_s=round(time.perf_counter() - start, 3),
            results=[],
            error=f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}",
        )
    return record


def main(argv: list[str]) -> int:
    """Register the tables, run every job in order, write RESULT after every run."""
    request_path, result_path = Path(argv[1]), Path(argv[2])
    request = json.loads(request_path.read_text())
    dpmine = _module("dpmine")
    server_package = _module("dpmine_server")
    payload: dict[str, Any] = {
        "imports": {"dpmine": dpmine.__file__, "dpmine_server": server_package.__file__},
        "metadata": {},
        "runs": [],
    }
    with dpmine.connect(request["url"], request["owner_key"]) as owner:
        for table in request["tables"]:
            payload["metadata"][table["id"]] = register(owner, table)
        analyst = owner.admin.add_principal("analyst", "analyst").api_key
        for table in request["tables"]:
            owner.admin.grant(table["id"], "analyst", request["grant"])
    total = len(request["jobs"])
    with dpmine.connect(request["url"], analyst, timeout=CLIENT_TIMEOUT_S) as connection:
        handles = {table["id"]: connection.dataset(table["id"]) for table in request["tables"]}
        for number, job in enumerate(request["jobs"], start=1):
            record = one_run(handles[job["table"]], job)
            payload["runs"].append(record)
            result_path.write_text(json.dumps(payload, default=repr) + "\n")
            head = (
                f"  baseline [{number:3}/{total}] {job['table']:8} {job['miner']:13} "
                f"ε={job['epsilon']:<4g} run {job['repetition'] + 1}: {record['wall_s']:7.1f} s"
            )
            if record["status"] == "ok":
                print(f"{head}, shown {len(record['results'])}", flush=True)
            else:
                print(f"{head}, FAILED {record['error'].splitlines()[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
