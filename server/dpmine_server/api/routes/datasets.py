"""Analyst views of datasets: public schema, budget, dry-run estimates."""

from __future__ import annotations

import json

from fastapi import APIRouter

from dpmine.wire import (
    MAX_ESTIMATE_DISTINCT_CALLS,
    BudgetStatus,
    DatasetInfo,
    DatasetMetadata,
    EstimateRequest,
    EstimateResponse,
    PlannedCallCost,
)
from dpmine_server.api.common import ERRORS
from dpmine_server.api.deps import PrincipalDep, ServicesDep, SessionDep
from dpmine_server.dp.budget import Epsilon, ledger_amount
from dpmine_server.errors import Forbidden, InvalidRequest
from dpmine_server.services.accounting import dataset_unit, display_remaining
from dpmine_server.services.datasets import dataset_info, stored_policy
from dpmine_server.services.executor import check_guarantee_policy

router = APIRouter(tags=["datasets"])


@router.get("/datasets", response_model=list[DatasetInfo], responses=ERRORS)
def list_datasets(
    principal: PrincipalDep, services: ServicesDep, session: SessionDep
) -> list[DatasetInfo]:
    """Datasets you can query (owners: all datasets)."""
    if principal.role == "owner":
        return services.datasets.list_all(session)
    return services.datasets.list_for_analyst(session, principal)


@router.get("/datasets/{dataset_id}", response_model=DatasetInfo, responses=ERRORS)
def show_dataset(
    dataset_id: str, principal: PrincipalDep, services: ServicesDep, session: SessionDep
) -> DatasetInfo:
    """Public metadata of one dataset."""
    if principal.role == "owner":
        return dataset_info(services.datasets.get(session, dataset_id))
    return dataset_info(services.datasets.get_for_analyst(session, dataset_id, principal))


@router.get("/datasets/{dataset_id}/budget", response_model=BudgetStatus, responses=ERRORS)
def budget(
    dataset_id: str, principal: PrincipalDep, services: ServicesDep, session: SessionDep
) -> BudgetStatus:
    """Your grant on the dataset and what is left of it and of the dataset cap."""
    services.datasets.get_for_analyst(session, dataset_id, principal)
    return services.ledger.budget_status(principal, dataset_id)


@router.post("/datasets/{dataset_id}/estimate", response_model=EstimateResponse, responses=ERRORS)
def estimate(
    dataset_id: str,
    body: EstimateRequest,
    principal: PrincipalDep,
    services: ServicesDep,
    session: SessionDep,
) -> EstimateResponse:
    """Exact cost of a list of calls and whether your remaining budget covers it. Free.

    A call the dataset's guarantee policy does not serve is refused (403) as the call itself
    would be, so a miner's plan fails before it spends anything."""
    dataset = services.datasets.get_for_analyst(session, dataset_id, principal)
    metadata = DatasetMetadata.model_validate(dataset.metadata_json)
    policy = stored_policy(dataset.guarantee_policy)
    unit = dataset_unit(dataset)
    costs: list[PlannedCallCost] = []
    total_epsilon = Epsilon.zero()  # what the kernels run at, summed
    total_units = 0  # what the ledger would debit, in the dataset's unit
    # A plan repeats a few calls many times: price each different call once.
    priced_calls: dict[str, tuple[PlannedCallCost, Epsilon, int]] = {}
    for index, call in enumerate(body.calls):
        key = json.dumps([call.operation, call.request], sort_keys=True)
        known = priced_calls.get(key)
        if known is None:
            if len(priced_calls) >= MAX_ESTIMATE_DISTINCT_CALLS:
                raise InvalidRequest(
                    f"an estimate prices at most {MAX_ESTIMATE_DISTINCT_CALLS} different calls; "
                    "split the plan into several estimates"
                )
            try:
                spec = services.executor.spec(call.operation)
                priced = services.executor.price(spec, call.request, metadata, unit)
                check_guarantee_policy(dataset_id, spec.name, priced.guarantee, policy)
            except InvalidRequest as error:
                raise InvalidRequest(f"call {index} ({call.operation}): {error.message}") from error
            except Forbidden as error:
                raise Forbidden(f"call {index}: {error.message}") from error
            known = (
                PlannedCallCost(
                    operation=call.operation,
                    epsilon=priced.cost.display(),
                    epsilon_exact=priced.cost.exact_str(),
                    guarantee="pure" if priced.guarantee == "pure" else "approximate",
                    rho_exact=priced.charge.exact_str() if unit == "zcdp" else None,
                ),
                priced.cost,
                priced.charge.units,
            )
            priced_calls[key] = known
        costs.append(known[0])
        total_epsilon = total_epsilon + known[1]
        total_units += known[2]
    remaining = services.ledger.remaining(principal.id, dataset_id)
    total = ledger_amount(unit, total_units)
    return EstimateResponse(
        calls=costs,
        total_epsilon=total_epsilon.display(),
        total_epsilon_exact=total_epsilon.exact_str(),
        remaining_epsilon=display_remaining(unit, remaining.units),
        fits=total.units <= remaining.units,
        accounting=unit,
        total_rho_exact=total.exact_str() if unit == "zcdp" else None,
        remaining_rho_exact=remaining.exact_str() if unit == "zcdp" else None,
    )
