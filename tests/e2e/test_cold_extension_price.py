"""A padded ``serenade.extend_one`` call that the public cache model cannot price pays its whole
public price (services/timing.py, api/common.py ``_padded_operation``; issue #23).

The route prices an extension call against its store's cache model only when its dataset is
resident; it then skips the cold price, which costs a few milliseconds of each padded round.
A call on a dataset that is not resident (here evicted by a count on another one, with one
dataset kept loaded) must still be held to its cold price plus the public load budget: the
answer can be late on a loaded machine, never early, so the lower bound is exact under any
load. The next call, on the now resident store, is priced warm and answered below that bound:
both branches of the route ran."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from dpmine.wire import ExtendOneRequest
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.settings import Settings
from privacy.test_audit_timing_extensions import PADDED_ENV, POSITIONS, _redescriptions
from support.accounts import analyst_account, owner_connection, seeded_server
from support.datasets import mushroom_metadata, register_mushroom, register_table
from support.servers import Account

#: The extension timing audit's padded server, keeping one dataset loaded.
ONE_RESIDENT_ENV = {**PADDED_ENV, "DPMINE_MAX_CACHED_DATASETS": "1"}


@pytest.fixture(scope="module")
def one_resident(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Account, str, str]]:
    workdir = tmp_path_factory.mktemp("cold-extension")
    with (
        seeded_server(
            workdir, name="cold-extension", seed="5", extra_env=ONE_RESIDENT_ENV
        ) as server,
        owner_connection(server) as owner,
        analyst_account(server, owner) as analyst,
    ):
        mushroom = register_mushroom(owner, epsilon_cap=100.0).id
        evictor = register_table(owner, workdir, epsilon_cap=100.0).id
        for dataset_id in (mushroom, evictor):
            owner.admin.grant(dataset_id, analyst.name, 50.0)
        yield analyst, mushroom, evictor


def _policy() -> TimingPolicy:
    """The server's padding policy, from the same public settings."""
    settings = Settings(
        environment="test",
        secret_key="s" * 40,
        timing_padding=True,
        timing_grid_ms=float(PADDED_ENV["DPMINE_TIMING_GRID_MS"]),
        timing_base_ms=float(PADDED_ENV["DPMINE_TIMING_BASE_MS"]),
        timing_scale=float(PADDED_ENV["DPMINE_TIMING_SCALE"]),
        timing_overrun="fail",
    )
    return TimingPolicy.from_settings(settings)


def test_an_extension_on_an_evicted_dataset_is_held_to_its_cold_price(
    one_resident: tuple[Account, str, str],
) -> None:
    analyst, mushroom, evictor = one_resident
    request = ExtendOneRequest(
        mode="es", collection=_redescriptions()[:POSITIONS], epsilon=0.01, quality={"x0": 812.0}
    )
    policy, metadata = _policy(), mushroom_metadata()
    cold_price = policy.budget("serenade.extend_one", request, metadata)
    load = policy.load_budget(metadata)
    # Without the cold price the answer would come at the base plus the load: the bound below
    # is several grid ticks above that.
    assert cold_price - policy.base >= 5 * policy.grid

    connection = analyst.connection
    connection.dataset(evictor).count(epsilon=0.01)  # mushroom is no longer resident
    sent = time.perf_counter()
    connection.dataset(mushroom).run(request)
    cold_latency = time.perf_counter() - sent
    assert cold_latency >= cold_price + load

    sent = time.perf_counter()
    connection.dataset(mushroom).run(request)
    warm_latency = time.perf_counter() - sent
    assert warm_latency < cold_price + load  # resident now: no load, priced by the model
