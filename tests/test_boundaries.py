"""Package boundaries (DESIGN.md "Architecture"): the analyst client installs and imports
without the server stack, and the pure kernels import without the web framework or database.

Each check imports in a fresh interpreter and reads ``sys.modules``.
"""

from __future__ import annotations

import ast
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
    "dpmine.treereds",
    "dpmine.miners",
)
SERVER_STACK = ("fastapi", "sqlalchemy", "starlette", "uvicorn", "opendp", "randomgen")
KERNEL_MODULES = ("dpmine_server.dp.mechanisms", "dpmine_server.operations")
WEB_AND_DATABASE = ("fastapi", "sqlalchemy")
WEB_FRAMEWORK = ("fastapi", "starlette")
#: Packages below the API layer: they raise the plain error classes and import no web framework.
BELOW_THE_API = ("services", "operations", "dp", "data")
#: Client modules the server must not import: the text parser/printer and the analyst's helpers.
#: What the server shares with the client lives in ``dpmine.wire`` (query_tree, statistics).
CLIENT_ONLY = ("dpmine.queries", "dpmine.stats")


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
        for name in dir(dpmine)
        if not name.startswith("_") and not isinstance(getattr(dpmine, name), types.ModuleType)
    )
    assert dpmine.__all__ == public
    for name in dpmine.__all__:
        assert getattr(dpmine, name).__module__.startswith("dpmine."), name


def imported_modules(path: Path) -> set[str]:
    """Absolute module names a source file imports (``from a import b`` gives a and a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_server_imports_neither_the_query_parser_nor_the_client_stats() -> None:
    root = Path(dpmine_server.__file__).parent
    offenders = {
        str(path.relative_to(root)): sorted(
            name
            for name in imported_modules(path)
            if any(name == banned or name.startswith(f"{banned}.") for banned in CLIENT_ONLY)
        )
        for path in sorted(root.rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_check_sees_client_only_imports() -> None:
    # Guards against a check that can never fail: the client's own modules import them.
    client = Path(dpmine.__file__).parent
    assert "dpmine.queries" in imported_modules(client / "__init__.py")
    assert "dpmine.wire.statistics" in imported_modules(client / "stats.py")


def test_the_wire_package_imports_only_pydantic_and_the_standard_library() -> None:
    wire = Path(dpmine.__file__).parent / "wire"
    allowed = {*sys.stdlib_module_names, "pydantic", "pydantic_core", "typing_extensions"}
    foreign = {
        path.name: sorted(
            name
            for name in imported_modules(path)
            if name.split(".")[0] not in allowed and not name.startswith("dpmine.wire")
        )
        for path in sorted(wire.glob("*.py"))
    }
    assert {name: names for name, names in foreign.items() if names} == {}
