"""Client-side response times of padded requests on two neighbouring datasets (the timing
audits of tests/privacy/)."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from support.servers import http_client

__all__ = ["interleaved_response_times"]


def interleaved_response_times(
    url: str,
    api_key: str,
    datasets: Sequence[str],
    path: str,
    body: dict[str, Any],
    *,
    requests: int,
    threads: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of ``requests`` calls of ``POST /v1/datasets/<id>/<path>`` on each of the two
    ``datasets``, in a random interleaved order over ``threads`` clients; every call must
    succeed."""
    order = [0] * requests + [1] * requests
    random.Random(seed).shuffle(order)
    clients = [http_client(url) for _ in range(threads)]

    def one(job: tuple[int, int]) -> tuple[int, float]:
        position, side = job
        start = time.perf_counter()
        response = clients[position % threads].post(
            f"/v1/datasets/{datasets[side]}/{path}", json=body, headers={"X-API-Key": api_key}
        )
        elapsed = time.perf_counter() - start
        assert response.status_code == 200, response.text
        return side, elapsed

    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            results = list(pool.map(one, enumerate(order)))
    finally:
        for client in clients:
            client.close()
    times = [np.array([t for s, t in results if s == side]) for side in (0, 1)]
    return times[0], times[1]
