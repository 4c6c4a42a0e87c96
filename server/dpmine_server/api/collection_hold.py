"""Nothing is read or shown inside a garbage collection's public window (services/collector.py;
DESIGN.md contract item 7, "time is an output").

:class:`CollectionHold` (pure ASGI middleware, outermost) makes every HTTP request that starts
during a full collection's window wait for the window's end before it is routed, and every
message of an answer that would go out during a window wait for its end too. So the requests
that are not padded (health, budget, job states, the console) show no more of a collection's
pause than the padded ones, whose arrival api/deps.py takes after the same wait. The proof is
the collector's: every moment the process shows is either outside every window or a window's
end, a public time, unless the pause overran the window (logged).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpmine_server.services.collector import IdleCollector

__all__ = ["CollectionHold", "collector_of"]


def collector_of(scope: Scope) -> IdleCollector | None:
    """The idle collector of the app serving ``scope`` (None before start-up, or when padding
    is off: Python's automatic collections, no window)."""
    app = scope.get("app")
    services = getattr(getattr(app, "state", None), "services", None)
    return getattr(services, "collector", None)


class CollectionHold:
    """Requests start, and answers go out, outside the collections' windows (module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        collector = collector_of(scope) if scope["type"] == "http" else None
        if collector is None:
            await self.app(scope, receive, send)
            return
        await collector.hold()

        async def held_send(message: Message) -> None:
            await collector.hold()
            await send(message)

        await self.app(scope, receive, held_send)
