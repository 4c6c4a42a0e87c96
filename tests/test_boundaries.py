"""Package boundaries (DESIGN.md "Architecture"): the analyst client installs and imports
without the server stack, and the pure kernels import without the web framework or database.

Each check imports in a fresh interpreter and reads ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import dpmine
import dpmine_server

CLIENT_MODULES = (
    "dpmine",
    "dpmine.wire",
    "dpmine.connection",
    "dpmine.queries",
    "dpmine.errors",
    "dpmine.stats",
)
SERVER_STACK = ("fastapi", "sqlalchemy", "starlette", "uvicorn", "opendp", "randomgen")
KERNEL_MODULES = ("dpmine_server.dp.mechanisms", "dpmine_server.operations")
WEB_AND_DATABASE = ("fastapi", "sqlalchemy")
WEB_FRAMEWORK = ("fastapi", "starlette")
#: Packages below the API layer: they raise the plain error classes and import no web framework.
BELOW_THE_API = ("services", "operations", "dp", "data")


def loaded_after_imports(steps: list[tuple[str, ...]], watched: tuple[str, ...]) -> list[list[str]]:
    """In one fresh interpreter, import each step's modules in turn; after each step, the
    top-level packages among ``watched`` loaded so far."""
    program = (
        "import importlib, json, sys\n"
        f"watched = set({list(watched)!r})\n"
        "seen = []\n"
        f"for step in {steps!r}:\n"
        "    for name in step:\n"
        "        importlib.import_module(name)\n"
        "    seen.append(sorted({m.split('.')[0] for m in sys.modules} & watched))\n"
        "print(json.dumps(seen))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[list[str]] = json.loads(result.stdout)
    return loaded


def test_client_imports_without_the_server_stack() -> None:
    assert loaded_after_imports([CLIENT_MODULES], SERVER_STACK) == [[]]


def test_kernels_import_without_web_framework_or_database() -> None:
    # The second step guards against a check that can never fail: the API does load them.
    steps = [KERNEL_MODULES, ("dpmine_server.api.deps",)]
    assert loaded_after_imports(steps, WEB_AND_DATABASE) == [[], list(WEB_AND_DATABASE)]


def below_the_api_modules() -> list[str]:
    """``dpmine_server.errors`` and every module of the packages below the API layer."""
    root = Path(dpmine_server.__file__).parent
    names = ["dpmine_server.errors"]
    for package in BELOW_THE_API:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            names.append(".".join(("dpmine_server", *parts)).removesuffix(".__init__"))
    return names


def test_errors_services_and_kernels_import_without_web_framework() -> None:
    modules = below_the_api_modules()
    assert "dpmine_server.services.executor" in modules
    # The second step guards against a check that can never fail: the app does load them.
    steps = [tuple(modules), ("dpmine_server.app",)]
    assert loaded_after_imports(steps, WEB_FRAMEWORK) == [[], list(WEB_FRAMEWORK)]


def test_public_names_are_sorted_and_complete() -> None:
    assert dpmine.__all__ == sorted(dpmine.__all__)
    public = sorted(
        name
        for name, value in vars(dpmine).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )
    assert dpmine.__all__ == public
    for name in dpmine.__all__:
        assert getattr(dpmine, name).__module__.startswith("dpmine."), name
