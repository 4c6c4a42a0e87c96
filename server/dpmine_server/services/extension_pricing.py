"""Pricing a synchronous ``serenade.extend_one`` call against the public cache model of its
store (services/extension_model.py; issue #23): the glue between the route, the model and
the padding budget (services/timing.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from dpmine.wire import DatasetMetadata, ExtendOneRequest
from dpmine_server.operations.redescriptions import (
    extension_priced_keys,
    extension_resources_priced_key,
)
from dpmine_server.services.container import Services
from dpmine_server.services.extension_model import ExtensionCacheModel, PricedKey, Ticket
from dpmine_server.services.timing import TimingPolicy

__all__ = ["MODEL_NAME", "ExtensionCallKeys", "price_extension"]

logger = logging.getLogger(__name__)

#: The name of the model on its store (:meth:`ColumnStore.attachment`).
MODEL_NAME = "serenade.extension_model"


@dataclass(frozen=True, slots=True)
class ExtensionCallKeys:
    """The model's keys of one ``serenade.extend_one`` call: one per position (its candidate
    set) and one for the call's banks and grids (operations/serenade.py
    ``ExtensionResources``)."""

    positions: tuple[PricedKey, ...]
    resources: PricedKey

    @classmethod
    def of(cls, request: ExtendOneRequest, metadata: DatasetMetadata) -> ExtensionCallKeys:
        """The keys of ``request`` (public: the request and the metadata)."""
        return cls(
            positions=tuple(extension_priced_keys(request, metadata)),
            resources=extension_resources_priced_key(request, metadata),
        )

    @property
    def all(self) -> tuple[PricedKey, ...]:
        """Every key, as the model registers them."""
        return (*self.positions, self.resources)

    def budget(
        self,
        policy: TimingPolicy,
        request: ExtendOneRequest,
        metadata: DatasetMetadata,
        warm: frozenset[str],
    ) -> float:
        """The call's padding budget with the keys of ``warm`` held: its warm positions priced
        by their draw only, and its per-call work left out when its resources are held
        (:meth:`TimingPolicy.extend_budget`)."""
        positions = sum(1 for key in self.positions if key.text in warm)
        held = self.resources.text in warm
        return policy.extend_budget(request, metadata, positions, resources_held=held)


def price_extension(
    services: Services,
    policy: TimingPolicy,
    *,
    dataset_id: str,
    request: ExtendOneRequest,
    arrival: float,
    reserve: Callable[[float], float],
) -> tuple[float, Ticket] | None:
    """The padding budget of a ``serenade.extend_one`` call that arrived at ``arrival``
    (monotonic), priced with the positions the model of its resident store holds at
    ``arrival`` warm, and the ticket registered with its deadline; None when there is no
    resident store (the caller then prices it cold, :func:`arrival_budgets`), padding is
    off, or the request cannot be priced (it is refused before its charge anyway).
    ``reserve(budget)`` reserves the call's kernel in its process's lane and returns the
    public wait that its deadline adds (services/kernel_lane.py); it is called once, when
    the budget is known, and only when this returns a ticket.

    Public values only: the request, the public metadata, whether the version is resident
    (public, :meth:`DatasetService.is_resident`), the model's public state and the lane's."""
    if not policy.fails_closed:
        return None
    datasets = services.datasets
    try:
        with services.sessions() as session:
            version = datasets.current_version(session, dataset_id)
            if version is None:
                return None
            metadata = datasets.public_metadata(session, dataset_id)
        store = datasets.resident_store(dataset_id, version)
        if store is None:
            return None
        keys = ExtensionCallKeys.of(request, metadata)
    except Exception:  # refused before the charge by the executor, which says why
        logger.debug("extension call not priced against the cache model", exc_info=True)
        return None
    model = store.attachment(MODEL_NAME, ExtensionCacheModel)
    budgets: list[float] = []

    def deadline_of(warm: frozenset[str]) -> float:
        budget = keys.budget(policy, request, metadata, warm)
        budgets.append(budget)
        return arrival + policy.deadline_offset(budget + reserve(budget))

    ticket = model.price(store, keys.all, arrival, deadline_of)
    return budgets[-1], ticket
