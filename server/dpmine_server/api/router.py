"""Every route module, mounted under /v1 (one line each)."""

from fastapi import APIRouter

from dpmine_server.api.routes import (
    admin,
    batch,
    counts,
    datasets,
    health,
    itemsets,
    jobs,
    redescriptions,
    rule_lists,
    trees,
)

api_router = APIRouter(prefix="/v1")
api_router.include_router(health.router)
api_router.include_router(datasets.router)
api_router.include_router(counts.router)
api_router.include_router(redescriptions.router)
api_router.include_router(itemsets.router)
api_router.include_router(trees.router)
api_router.include_router(rule_lists.router)
api_router.include_router(batch.router)
api_router.include_router(jobs.router)
api_router.include_router(admin.router)
