"""Privacy audit of the exact sampler of the ``tree.mcmc`` target (ALGORITHMS.md §3.4;
``operations/tree_exact.py``) on the neighbouring toy datasets of ``test_audit_trees`` (D and
D' = D plus a row that moves the score of one split by 4/3 of Δ = 2, in a child or, in the
missing-child regime, in the cell of the rows a missing value stops: ALGORITHMS.md §6 item 18),
at depth 1 where the target is one exponential mechanism over the splits p, q, x ≤ 0, 2, 4.
The registered ``tree.mcmc`` with sampler "exact" runs N times a side from seeded generators;
the Clopper-Pearson lower bound on the privacy loss must stay below ε = 1 (alpha = 1e-5), and
the broken variant (the kernel with Δ/10, i.e. run at 10·ε) is flagged.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from dpmine.wire import AttributeTarget, TreeMCMCRequest
from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_exact import exact_target, sample_tree_exact
from dpmine_server.operations.tree_kernels import SplitSpace, make_target
from privacy.audit import AuditResult, assert_audit_flags, assert_audit_passes, audit_categorical
from privacy.sizes import short_and_long
from privacy.test_audit_trees import (
    ALPHA,
    CHARGE,
    EPSILON,
    REGIMES,
    SPLITS,
    _label,
    _neighbours,
)

#: Draws a side: short by default, long under ``slow``.
SAMPLES = short_and_long("samples", 2_000, 6_000)


def _registered(store: ColumnStore, seed: int, samples: int) -> list[Hashable]:
    """Draws of the registered kernel, ``tree.mcmc`` with sampler "exact" at the charged ε."""
    request = TreeMCMCRequest(
        view="left",
        target=AttributeTarget(attribute="t"),
        depth=1,
        epsilon=EPSILON,
        sampler="exact",
    )
    spec = CATALOG["tree.mcmc"]
    spec.validate(request, store.metadata)
    assert spec.request_guarantee(request, store.metadata) == "pure"
    cost = spec.cost(request)
    assert cost == CHARGE
    rng = seeded_generator(seed)
    runs = [spec.run(store, request, cost, rng, no_progress) for _ in range(samples)]
    assert {run["sampler"] for run in runs} == {"exact"}
    return [_label(run["tree"]) for run in runs]


def _outputs(store: ColumnStore, seed: int, epsilon: float, samples: int) -> list[Hashable]:
    """Draws of the kernel at ``epsilon`` (the registered operation at the charged ε)."""
    if epsilon == EPSILON:
        return _registered(store, seed, samples)
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    target = exact_target(
        store,
        space,
        labels.class_words(),
        epsilon=epsilon,
    )
    rng = seeded_generator(seed)
    return [
        _label(space.tree(1, sample_tree_exact(target, depth=1, rng=rng))) for _ in range(samples)
    ]


def _audit(epsilon: float, samples: int, regime: str) -> AuditResult:
    data, neighbour = _neighbours(regime)
    return audit_categorical(
        _outputs(data, 51, epsilon, samples),
        _outputs(neighbour, 52, epsilon, samples),
        categories=SPLITS,
        alpha=ALPHA,
    )


@SAMPLES
@pytest.mark.parametrize("regime", list(REGIMES))
def test_exact_tree_draws_pass_the_audit(samples: int, regime: str) -> None:
    assert_audit_passes(_audit(EPSILON, samples, regime), EPSILON)


@SAMPLES
@pytest.mark.parametrize("regime", list(REGIMES))
def test_audit_flags_the_exact_tree_sampler_with_a_tenth_of_the_sensitivity(
    samples: int, regime: str
) -> None:
    assert_audit_flags(_audit(10 * EPSILON, samples, regime), EPSILON)
