"""Serenade keeps each redescription once per run, by canonical form (issue #21).

A stand-in dataset answers the charged calls: its initial pairs hold one redescription twice
(once with its terms in another order), so the final ES collection repeats it. ES measures it
once with the shares of both positions (ε_qual spent in full; on a zCDP dataset √2 times one
share, the same ρ); CS chains that end on it give one result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, cast

import pytest

from dpmine.connection import DatasetHandle
from dpmine.miners import SerenadeCS, SerenadeES
from dpmine.queries import parse_redescription
from dpmine.wire import (
    CalibrateRequest,
    CalibrateResponse,
    ComputeQualityRequest,
    ComputeQualityResponse,
    DatasetInfo,
    DatasetMetadata,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    InitialPairsResponse,
    NoisyCells,
    NoisyStatistics,
    Receipt,
)
from dpmine_server.operations.serenade_quality import line_search

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 1000,
        "attributes": [
            {"type": "boolean", "name": "a", "view": "left"},
            {"type": "boolean", "name": "c", "view": "left"},
            {"type": "boolean", "name": "t", "view": "right"},
        ],
    }
)
FIRST = parse_redescription("[a] & [c] <=> [t]")
SAME = parse_redescription("[c] & [a] <=> [t]")  # the same rows, written in another order
OTHER = parse_redescription("[a] <=> ![t]")


def _receipt(epsilon: float) -> Receipt:
    return Receipt(
        ledger_entry_id=1,
        dataset_id="d",
        operation="serenade",
        epsilon=epsilon,
        epsilon_exact=str(epsilon),
        guarantee="pure",
        remaining_epsilon=1.0,
        created_at=datetime.now(UTC),
    )


class _Calibrator:
    """The free ``serenade.calibrate`` the miner asks for its steepness: the server's own line
    search (public arithmetic)."""

    def call(
        self, path: str, request: CalibrateRequest, response: type[CalibrateResponse]
    ) -> CalibrateResponse:
        assert path == "/v1/datasets/d/redescriptions/serenade/calibrate"
        s, sens = line_search(
            request.x0,
            METADATA.n_max,
            y0=request.y0,
            s2=request.s2,
            calibration=request.calibration,
        )
        return response(s=s, delta=sens.symmetric, x0=request.x0, n_max=METADATA.n_max)


class _Repeats:
    """Initial pairs FIRST, SAME, OTHER; extensions leave the collection as it is; every
    quality check answers J = 0.8."""

    schema = METADATA
    id = "d"
    connection = _Calibrator()

    def __init__(self, accounting: Literal["pure", "zcdp"] = "pure") -> None:
        self.measured: list[ComputeQualityRequest] = []
        self.info = DatasetInfo(
            id="d",
            name="d",
            version=1,
            status="active",
            accounting=accounting,
            metadata=METADATA,
            created_at=datetime.now(UTC),
        )

    def run(
        self, request: InitialPairsRequest | ExtendOneRequest | ComputeQualityRequest
    ) -> InitialPairsResponse | ExtendOneResponse | ComputeQualityResponse:
        receipt = _receipt(request.epsilon)
        if isinstance(request, InitialPairsRequest):
            return InitialPairsResponse(
                pairs=[FIRST, SAME, OTHER],
                threshold_mode="grid",
                s=1.0,
                delta=1.0,
                receipt=receipt,
            )
        if isinstance(request, ExtendOneRequest):
            return ExtendOneResponse(
                position=0,
                redescription=request.collection[0],
                changed=False,
                threshold_mode="grid",
                receipt=receipt,
            )
        self.measured.append(request)
        return ComputeQualityResponse(
            mode="cells",
            cells=NoisyCells(e11=80, e10=10, e01=10, e00=100),
            statistics=NoisyStatistics(
                support=80, union=100, jaccard=0.8, support_left=90, support_right=90, n_rows=200
            ),
            receipt=receipt,
        )

    def run_batch(
        self, requests: Sequence[ExtendOneRequest | ComputeQualityRequest]
    ) -> list[InitialPairsResponse | ExtendOneResponse | ComputeQualityResponse]:
        """A batch answers as its parts one by one (``DatasetHandle.run_batch``)."""
        return [self.run(request) for request in requests]


def test_es_measures_a_repeated_redescription_once_with_its_shares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(SerenadeES, "_check_budget", lambda *_: None)
    server = _Repeats()
    miner = SerenadeES(
        preset="paper", epsilon=10.0, n_initial=3, rounds=1, x0=10.0, split=(0.6, 0.1, 0.3)
    )
    miner.mine(cast(DatasetHandle, server))
    assert [r.redescription for r in miner.redescriptions_] == [FIRST, OTHER]
    # ε_qual = 3: FIRST holds two of the three positions, so it is measured at 2, OTHER at 1.
    assert [request.redescription for request in server.measured] == [FIRST, OTHER]
    assert [request.epsilon for request in server.measured] == pytest.approx([2.0, 1.0])
    assert [r.epsilon for r in miner.redescriptions_] == pytest.approx([2.0, 1.0])
    assert miner.budget_spent_ == pytest.approx(10.0)


def test_es_on_zcdp_measures_a_repeat_at_the_same_rho(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two checks at ε cost 2·ε²/2; the one check that replaces them runs at √2·ε."""
    monkeypatch.setattr(SerenadeES, "_check_budget", lambda *_: None)
    server = _Repeats("zcdp")
    miner = SerenadeES(preset="paper", rho=0.5, n_initial=3, rounds=1, x0=10.0)
    miner.mine(cast(DatasetHandle, server))
    assert [request.redescription for request in server.measured] == [FIRST, OTHER]
    first, other = (request.epsilon for request in server.measured)
    assert first == pytest.approx(math.sqrt(2) * other, rel=1e-9)
    share = miner.settings_.shares[2] / 3
    assert other == pytest.approx(share, rel=1e-12)


def test_cs_chains_that_end_on_one_redescription_give_one_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(SerenadeCS, "_check_budget", lambda *_: None)
    miner = SerenadeCS(preset="paper", epsilon=10.0, n_initial=3, tau=1, x0=10.0)
    miner.mine(cast(DatasetHandle, _Repeats()))
    assert [r.redescription for r in miner.redescriptions_] == [FIRST, OTHER]
