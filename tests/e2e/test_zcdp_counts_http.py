"""Counts on a zCDP dataset draw the discrete Gaussian (issue #24), end to end: a real uvicorn
server on SQLite (``sqlite_server``), the real client over HTTP and the ``dpmine`` CLI.

* ``count.noisy`` and ``red.compute_quality`` on a zCDP dataset report
  ``noise = {"kind": "discrete_gaussian", "scale": σ}`` with σ = 1/ε (Δ₂ = 1) and are charged
  ρ = ε²/2; on a pure dataset the same calls report the discrete Laplace of scale 1/ε;
* the CLI prints the 90 % interval of the count and of the quality's support from the
  Gaussian's exact tail (the half-width is recomputed here from the pmf, independently of the
  client library), and names the noise it used.
"""

from __future__ import annotations

import math
import re
import shlex
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import dpmine
from dpmine.cli import app as analyst_app
from dpmine.miners.trees import released_noise
from dpmine.queries import parse_query
from dpmine.wire import (
    AttributeTarget,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    LeafCountsRequest,
    TreeExpMechRequest,
)
from support.datasets import (
    register_mushroom,
    register_table,
    table_metadata,
    unique_id,
    write_table_csv,
)
from support.servers import Account, LiveServer

EPSILON = 0.2  # σ = 5
ENV = {"COLUMNS": "250", "DPMINE_URL": "", "DPMINE_API_KEY": ""}
SMOKERS = 80  # rows 0, 3, 6, … of the 240-row generated table


def gaussian_half_width(sigma: float, miss: float) -> int:
    """The smallest t with P(|X| > t) ≤ miss for the discrete Gaussian of σ (exact pmf)."""
    ks = np.arange(-math.ceil(60 * sigma), math.ceil(60 * sigma) + 1)
    pmf = np.exp(-(ks.astype(np.float64) ** 2) / (2 * sigma**2))
    pmf /= pmf.sum()
    t = 0
    while pmf[np.abs(ks) > t].sum() > miss:
        t += 1
    return t


@pytest.fixture(scope="module")
def any_server(sqlite_server: LiveServer) -> LiveServer:
    """SQLite only: conftest's ``owner`` and ``analyst`` then connect to it."""
    return sqlite_server


@pytest.fixture
def zcdp_id(owner: dpmine.Connection, analyst: Account, tmp_path: Path) -> str:
    path = write_table_csv(tmp_path)
    request = CreateDatasetRequest(
        id=unique_id("zcount"),
        name="generated table (zCDP)",
        accounting="zcdp",
        epsilon_cap=5.0,  # ρ ≈ 0.38 at δ = 10⁻⁶
        cap_delta=1e-6,
        metadata=table_metadata(),
        source=CsvSource(path=path.name),
    )
    info = DatasetInfo.model_validate(
        owner.admin.upload_dataset(request, {"path": path})["dataset"]
    )
    owner.admin.grant(info.id, analyst.name, rho=0.3)
    return info.id


def cli(server: LiveServer, account: Account, command: str) -> str:
    args = ["--url", server.url, "--api-key", account.api_key, *shlex.split(command)]
    result = CliRunner().invoke(analyst_app, args, env=ENV)
    assert result.exit_code == 0, (result.output, repr(result.exception))
    return result.stdout


def test_a_count_on_a_zcdp_dataset_reports_gaussian_noise(zcdp_id: str, analyst: Account) -> None:
    handle = analyst.connection.dataset(zcdp_id)
    result = handle.count(parse_query("[smoker]"), epsilon=EPSILON)
    assert result.noise is not None
    assert result.noise.kind == "discrete_gaussian"
    assert result.noise.scale == pytest.approx(1 / EPSILON, rel=1e-12)
    assert result.receipt.accounting == "zcdp"
    assert result.receipt.zcdp is not None
    assert Decimal(result.receipt.zcdp.rho_exact) == pytest.approx(
        Decimal("0.02"), rel=Decimal("1e-9")
    )
    assert abs(result.count - SMOKERS) < 40  # 8σ

    quality = handle.quality(
        parse_query("[smoker]"), parse_query("[region = north]"), epsilon=EPSILON
    )
    assert quality.noise is not None
    assert quality.noise.kind == "discrete_gaussian"
    assert quality.noise.scale == pytest.approx(1 / EPSILON, rel=1e-12)
    paper = handle.quality(
        parse_query("[smoker]"), parse_query("[region = north]"), epsilon=EPSILON, mode="paper"
    )
    assert paper.noise is not None
    assert paper.noise.scale == pytest.approx(math.sqrt(2) / EPSILON, rel=1e-12)


def test_a_count_on_a_pure_dataset_keeps_laplace_noise(
    owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = register_table(owner, tmp_path)
    owner.admin.grant(info.id, analyst.name, epsilon=1.0)
    result = analyst.connection.dataset(info.id).count(None, epsilon=EPSILON)
    assert result.noise is not None
    assert result.noise.kind == "laplace"
    assert result.noise.scale == pytest.approx(1 / EPSILON)
    assert result.receipt.accounting == "pure"


def test_the_cli_prints_the_gaussian_intervals(
    sqlite_server: LiveServer, analyst: Account, zcdp_id: str
) -> None:
    t = gaussian_half_width(1 / EPSILON, 0.1)
    assert t == 8  # the Laplace of scale 5 needs 11
    out = cli(sqlite_server, analyst, f"count {zcdp_id} --where '[smoker]' --epsilon {EPSILON}")
    assert "discrete Gaussian noise σ 5" in " ".join(out.split())
    row = re.search(r"\[smoker\]\s+(-?\d+) \[(\d+), (\d+)\]\s+discrete Gaussian noise σ 5", out)
    assert row is not None, out
    count, low, high = map(int, row.groups())
    assert (low, high) == (max(count - t, 0), max(count + t, 0))

    out = cli(
        sqlite_server,
        analyst,
        f"quality {zcdp_id} '[smoker]' '[region = north]' --epsilon {EPSILON}",
    )
    assert "discrete Gaussian noise σ 5 per cell" in " ".join(out.split())
    row = re.search(r"\[region = north\]\s+(-?\d+) \[(\d+), (\d+)\]", out)
    assert row is not None, out
    support, low, high = map(int, row.groups())
    assert (low, high) == (max(support - t, 0), max(support + t, 0))


def test_tree_leaf_counts_on_a_zcdp_dataset_report_gaussian_noise(
    owner: dpmine.Connection, analyst: Account
) -> None:
    """Two depth-1 trees grown on the zCDP Mushroom views, then their partition (σ = 1/ε) and
    paper (σ = √2/ε) leaf counts."""
    info = register_mushroom(owner, cap_rho=1.0)
    owner.admin.grant(info.id, analyst.name, rho=0.5)
    handle = analyst.connection.dataset(info.id)
    trees = [
        handle.run(
            TreeExpMechRequest(
                view=view, target=AttributeTarget(attribute="class"), depth=1, epsilon=0.5
            )
        ).tree
        for view in ("left", "right")
    ]
    for release, sigma in (("partition", 1 / EPSILON), ("paper", math.sqrt(2) / EPSILON)):
        counts = handle.run(
            LeafCountsRequest.model_validate(
                {
                    "left_tree": trees[0],
                    "right_tree": trees[1],
                    "epsilon": EPSILON,
                    "release": release,
                }
            )
        )
        assert counts.noise is not None
        assert counts.noise.kind == "discrete_gaussian"
        assert counts.noise.scale == pytest.approx(sigma, rel=1e-12)
        assert counts.receipt.accounting == "zcdp"
        assert released_noise(counts, EPSILON) == ("discrete_gaussian", counts.noise.scale)
