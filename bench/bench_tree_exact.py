"""Where ``tree.mcmc``'s exact sampler fits, and its time per tree against the MCMC kernel
(issue #25 item 2).

For each view of the benchmark tables (mammals, asia, teeth: ``bench_serenade``'s views;
stroke, heart: ``trust_views``' weak-structure tables) and depth 1–3, with the view's
attributes and, when the view mixes types, only its Boolean and categorical ones (the public
``columns`` restriction): the candidate splits S, the exact sampler's public work bound with
2^depth target classes (a tree target, AltMCMC's steady state), and whether "auto" runs it
(``exact_tree_fits`` on the public bound G on the split groups, min(lattice points, n_max + 1)
per numeric attribute: work ≤ 1.2·10¹⁰ words and 3·G·⌈n_max/64⌉ ≤ 2²⁴ mask words; at depth 1
``exact_stump_fits``, the histogram path without masks; "work" is then still the
sum-product's). Where it fits, one exact draw and one 10,000-step chain (the MCMC kernel) are
timed in-process, after a warm-up of both, on the target "the first attribute of the other
view" (its classes shown).

Usage::

    PYTHONPATH=client:server:bench .venv/bin/python bench/bench_tree_exact.py [--datasets ...]
        [--out bench/out] [--smoke]

Prints a Markdown table (bench/README.md, "Exact tree sampler") and writes
``<out>/tree_exact.json``; ``--smoke`` runs the bundled Mushroom views only.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from _support import machine_info
from bench_serenade import SMOKE_KEY
from bench_trees import DATASETS, MC_ITERATIONS, prepare_table
from dpmine.wire import AttributeTarget, DatasetMetadata, View
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_exact import (
    exact_split_groups,
    exact_stump_fits,
    exact_target,
    exact_tree_fits,
    exact_tree_work,
    sample_stump_exact,
    sample_tree_exact,
)
from dpmine_server.operations.tree_kernels import SplitSpace, make_target
from dpmine_server.operations.tree_mcmc import sample_tree_mcmc

DEPTHS = (1, 2, 3)


def _restrictions(metadata: DatasetMetadata, view: View) -> list[tuple[str, list[str] | None]]:
    """All the view's attributes, and its Boolean and categorical ones when it has others."""
    names = [a.name for a in metadata.attributes if a.view == view]
    discrete = [a.name for a in metadata.attributes if a.view == view and a.type != "numeric"]
    found: list[tuple[str, list[str] | None]] = [("all", None)]
    if discrete and len(discrete) < len(names):
        found.append(("discrete", discrete))
    return found


def _target(metadata: DatasetMetadata, view: View) -> AttributeTarget:
    other = next(a for a in metadata.attributes if a.view != view)
    return AttributeTarget(attribute=other.name)


def _time_tree(
    store: ColumnStore, space: SplitSpace, target: AttributeTarget, depth: int
) -> tuple[float, float, int]:
    """(seconds of one exact draw, of one chain of MC_ITERATIONS steps, classes)."""
    labels = make_target(store, target)

    def exact() -> None:
        if depth == 1:  # tree.mcmc's depth-1 path: histograms, no masks
            sample_stump_exact(store, space, labels, epsilon=1.0, rng=seeded_generator(1))
            return
        sampler = exact_target(store, space, labels.class_words(), epsilon=1.0)
        sample_tree_exact(sampler, depth=depth, rng=seeded_generator(1))

    def chain() -> None:
        sample_tree_mcmc(
            store,
            space,
            labels,
            depth=depth,
            iterations=MC_ITERATIONS,
            epsilon=1.0,
            rng=seeded_generator(2),
            progress=no_progress,
        )

    seconds = []
    for run in (exact, chain):
        run()  # warm-up: compiled code loaded
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds[0], seconds[1], labels.n_classes


def _sampler(valid: bool, fits: bool) -> str:
    """What "auto" runs: "exact", "mcmc", or "–" when the view has too few splits."""
    if not valid:
        return "–"
    return "exact" if fits else "mcmc"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/dpmine-bench-tree-exact"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--smoke", action="store_true", help="the bundled Mushroom views only")
    args = parser.parse_args()
    keys = [SMOKE_KEY] if args.smoke else args.datasets.split(",")
    args.scratch.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}\n")
    print(
        "| dataset | view | attributes | S | G | depth | work (K = 2^D) | auto | exact s | "
        "chain s | K |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    rows: list[dict[str, Any]] = []
    for key in keys:
        data = prepare_table(key, args.scratch)
        metadata = data.metadata
        store: ColumnStore | None = None
        for view in ("left", "right"):
            for label, columns in _restrictions(metadata, view):
                space = SplitSpace.of(metadata, view, columns=columns)
                for depth in DEPTHS:
                    sizes = {
                        "depth": depth,
                        "n_splits": exact_split_groups(space, metadata.n_max),
                        "n_max": metadata.n_max,
                        "n_classes": 2**depth,
                    }
                    valid = space.n_splits >= 2**depth - 1  # else tree.mcmc refuses it
                    fits = (
                        exact_stump_fits(
                            n_families=len(space.families),
                            n_splits=space.n_splits,
                            n_max=metadata.n_max,
                            n_classes=2,
                        )
                        if depth == 1
                        else exact_tree_fits(**sizes)
                    )
                    row: dict[str, Any] = {
                        "dataset": key,
                        "view": view,
                        "attributes": label,
                        **sizes,
                        "work": exact_tree_work(**sizes),
                        "auto": _sampler(valid, fits),
                    }
                    if fits and valid:
                        if store is None:
                            store = load_store(metadata, data.source, base_dir=data.directory)[0]
                        exact_s, chain_s, classes = _time_tree(
                            store, space, _target(metadata, view), depth
                        )
                        row |= {"exact_s": exact_s, "chain_s": chain_s, "classes": classes}
                    rows.append(row)
                    timed = [
                        f"{row['exact_s']:.3f}" if "exact_s" in row else "",
                        f"{row['chain_s']:.3f}" if "chain_s" in row else "",
                        str(row.get("classes", "")),
                    ]
                    print(
                        f"| {key} | {view} | {label} | {space.n_splits} | "
                        f"{sizes['n_splits']} | {depth} | "
                        f"{row['work']:.2e} | {row['auto']} | " + " | ".join(timed) + " |",
                        flush=True,
                    )
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "tree_exact.json"
    path.write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
