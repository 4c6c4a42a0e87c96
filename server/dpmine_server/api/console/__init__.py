"""The owner console: a few server-rendered pages under ``/console`` (no script, no new
service). ``routes.py`` holds the pages, ``sessions.py`` the signed session cookie and the
CSRF tokens, ``plot.py`` the budget charts; ``templates/`` and ``static/`` ship in the wheel."""

from dpmine_server.api.console.routes import router

__all__ = ["router"]
