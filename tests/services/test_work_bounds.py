"""The padding budget prices the public bounds of the kernels' work (DESIGN.md contract item 7,
services/timing.py): Serenade's capped rejection proposals (issue #20, "bounded kernels").

Pure functions of public values, checked against the real kernels run through the operation
specs on a small hand-built store: the cap a kernel uses is the one the budget prices, the
budget pays for every capped proposal at no less than twice its measured cost, and the modes
that make no proposals price none.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    NumericAttribute,
    Redescription,
)
from dpmine_server.data.columns import BooleanColumn, ColumnStore, NumericColumn
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, serenade
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.redescriptions import (
    extend_proposals,
    pairs_enumeration,
    pairs_proposals,
    quality_parameters,
)
from dpmine_server.services.timing import operation_work

ROWS = 400
#: One proposal measured at 34–38 µs + 0.73 ns a row (services/timing.py): the budget must
#: pay at least twice that for each capped proposal.
MEASURED_PROPOSAL = (38e-6, 0.73e-9)


def _store(n_max: int = 1_000) -> ColumnStore:
    """Left: three Boolean columns; right: two numeric columns of all-distinct values and one
    Boolean column (so both explicit candidates and threshold families exist)."""
    generator = np.random.default_rng(7)
    attributes: list[AnyAttribute] = [BooleanAttribute(name=f"b{j}", view="left") for j in range(3)]
    attributes += [NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0) for j in range(2)]
    attributes.append(BooleanAttribute(name="r", view="right"))
    everyone = np.ones(ROWS, dtype=bool)
    columns: dict[str, BooleanColumn | NumericColumn] = {
        f"b{j}": BooleanColumn.from_arrays(f"b{j}", generator.random(ROWS) < 0.4, everyone)
        for j in range(3)
    }
    for j in range(2):
        columns[f"x{j}"] = NumericColumn.from_values(
            f"x{j}", generator.random(ROWS), lo=0.0, hi=1.0
        )
    columns["r"] = BooleanColumn.from_arrays("r", generator.random(ROWS) < 0.5, everyone)
    metadata = DatasetMetadata(kind="views", n_max=n_max, attributes=attributes)
    return ColumnStore(metadata, n_rows=ROWS, columns=columns)


def _pairs(epsilon: float, *, mode: str = "auto", count: int = 20) -> InitialPairsRequest:
    return InitialPairsRequest.model_validate(
        {
            "count": count,
            "epsilon": epsilon,
            "quality": {"x0": 20.0, "s": 0.05},
            "options": {"threshold_mode": mode},
        }
    )


def _extend(epsilon: float, *, mode: str = "auto") -> ExtendOneRequest:
    red = Redescription(left=BoolLiteral(attribute="b0"), right=BoolLiteral(attribute="r"))
    return ExtendOneRequest.model_validate(
        {
            "mode": "cs",
            "collection": [red.model_dump(mode="json")],
            "epsilon": epsilon,
            "quality": {"x0": 20.0, "s": 0.05},
            "options": {"threshold_mode": mode},
        }
    )


@pytest.fixture
def kernel_caps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The proposal caps the kernels compute (recorded, not changed)."""
    caps: list[int] = []
    cap = serenade.rejection_proposals

    def recorded(c: float, draws: int) -> int:
        caps.append(cap(c, draws))
        return caps[-1]

    monkeypatch.setattr(serenade, "rejection_proposals", recorded)
    return caps


@pytest.mark.parametrize("epsilon", [0.05, 1.0, 3.0])
def test_initial_pairs_price_the_cap_their_kernel_uses(
    kernel_caps: list[int], epsilon: float
) -> None:
    store = _store()
    request = _pairs(epsilon)
    spec = CATALOG["serenade.initial_pairs"]
    spec.validate(request, store.metadata)
    spec.run(store, request, spec.cost(request), seeded_generator(1), no_progress)
    assert kernel_caps == [pairs_proposals(request, store.metadata)]
    assert kernel_caps[0] >= request.count


@pytest.mark.parametrize("epsilon", [0.05, 1.0])
def test_extensions_price_the_cap_their_kernel_uses(kernel_caps: list[int], epsilon: float) -> None:
    store = _store()
    request = _extend(epsilon)
    spec = CATALOG["serenade.extend_one"]
    spec.validate(request, store.metadata)
    spec.run(store, request, spec.cost(request), seeded_generator(2), no_progress)
    assert kernel_caps == [extend_proposals(request, store.metadata)]
    assert kernel_caps[0] >= 1


@pytest.mark.parametrize("n_max", [1_000, 100_000, 10_000_000])
@pytest.mark.parametrize("count", [1, 20, 1000])
def test_the_budget_pays_every_capped_proposal(n_max: int, count: int) -> None:
    """The continuous request's work exceeds the grid one's (no proposals, the same other
    terms) by at least twice the measured cost of its capped proposals."""
    metadata = _store(n_max).metadata
    continuous, grid = _pairs(1.0, count=count), _pairs(1.0, mode="grid", count=count)
    proposals = pairs_proposals(continuous, metadata)
    assert proposals > 0
    assert pairs_proposals(grid, metadata) == 0
    fixed, per_row = MEASURED_PROPOSAL
    extra = operation_work("serenade.initial_pairs", continuous, metadata) - operation_work(
        "serenade.initial_pairs", grid, metadata
    )
    assert extra >= 2 * proposals * (fixed + per_row * n_max)


def test_no_proposals_are_priced_where_none_are_made() -> None:
    metadata = _store().metadata
    # c > 8: "auto" takes the grid, "continuous" enumerates (priced as cell pairs instead).
    per_epsilon = quality_parameters(_pairs(1.0).quality, metadata.n_max).coefficient(1.0)
    large = 1.01 * serenade.REJECTION_MAX_EXPONENT / per_epsilon  # one draw at c > 8
    assert pairs_proposals(_pairs(large, count=1), metadata) == 0
    enumerated = _pairs(large, mode="continuous", count=1)
    assert pairs_proposals(enumerated, metadata) == 0
    assert pairs_enumeration(enumerated, metadata) > 0
    # No numeric attribute in the right view: no threshold family, nothing to propose.
    no_numeric = metadata.model_copy(
        update={"attributes": [a for a in metadata.attributes if a.type != "numeric"]}
    )
    assert pairs_proposals(_pairs(1.0), no_numeric) == 0
    assert extend_proposals(_extend(1.0), no_numeric) == 0


def test_the_cap_grows_with_epsilon_and_the_draws() -> None:
    """One draw at a tiny ε (c ≈ 0, every proposal almost surely accepted) needs about
    ln(10⁹)/ln(1/(1 − e^−c)) proposals at most, a handful; a larger c per draw (more ε for the
    same draws) or more draws at the same c (ε/count fixed) need more."""
    metadata = _store().metadata
    assert 1 <= pairs_proposals(_pairs(1e-6, count=1), metadata) <= 5
    by_epsilon = [pairs_proposals(_pairs(epsilon), metadata) for epsilon in (0.1, 1.0, 10.0)]
    assert by_epsilon == sorted(by_epsilon)
    assert by_epsilon[0] < by_epsilon[-1]
    by_count = [
        pairs_proposals(_pairs(0.05 * count, count=count), metadata) for count in (1, 20, 1000)
    ]
    assert by_count == sorted(by_count)
    assert by_count[-1] >= 1000
