"""The documentation in docs/ stands alone and stays true to the code (issue #22).

* every link between the pages (and to a heading) resolves;
* the operation index of docs/operations.md lists exactly the wire table's operations, with
  their routes, execution modes and guarantees, and every spec section the API description cites
  is explained there;
* docs/operators.md names every ``DPMINE_*`` setting;
* the API description cites docs/, never design documents users do not have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpmine.wire import OPERATIONS
from dpmine_server.app import create_app
from dpmine_server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
#: Design documents of the project's authors that users do not have.
UNPUBLISHED = ("DESIGN.md", "ALGORITHMS.md", "DP-ENGINES.md", "BASELINES.md", "shared/")


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's rules) gives a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    return {_slug(match) for match in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def _links(page: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))


def test_the_three_pages_exist() -> None:
    assert [page.name for page in PAGES] == ["operations.md", "operators.md", "privacy.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_links_resolve(page: Path) -> None:
    broken = []
    for link in _links(page):
        if link.startswith(("http://", "https://")):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target) if target else page
        if not path.is_file() or (anchor and anchor not in _anchors(path)):
            broken.append(link)
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_pages_cite_no_unpublished_document(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert [name for name in UNPUBLISHED if name in text] == []


def _index_rows() -> dict[str, tuple[str, str, str]]:
    """Operation index of docs/operations.md: name → (route, mode, guarantee)."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.]+)` \| `([\w/-]+)` \| (\w+) \| ([\w—]+) \|", text, re.MULTILINE)
    return {name: (route, mode, guarantee) for name, route, mode, guarantee in rows}


def test_the_operation_index_matches_the_wire_table() -> None:
    documented = _index_rows()
    free = documented.pop("serenade.calibrate")
    assert free == ("redescriptions/serenade/calibrate", "inline", "—")
    assert documented == {
        name: (operation.path, operation.mode, operation.guarantee)
        for name, operation in OPERATIONS.items()
    }


def _openapi_text() -> str:
    settings = Settings(environment="test", database_url="sqlite:///unused.sqlite3")
    return str(create_app(settings).openapi())


def _explained_sections() -> set[str]:
    """The § numbers of the section index of docs/operations.md (ranges expanded)."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    index = text.split("## Section index", 1)[1]
    sections = set()
    for major, first, last in re.findall(r"^\| (\d+)\.(\d+)(?:–\d+\.(\d+))? \|", index, re.M):
        stop = int(last or first)
        sections |= {f"{major}.{minor}" for minor in range(int(first), stop + 1)}
    return sections


def test_the_api_description_cites_docs_and_every_cited_section_is_explained() -> None:
    description = _openapi_text()
    assert [name for name in UNPUBLISHED if name in description] == []
    cited_pages = set(re.findall(r"docs/([\w-]+\.md)", description))
    assert cited_pages == {"operations.md", "privacy.md"}
    cited = set(re.findall(r"§(\d+\.\d+)", description))
    assert cited, "the API description cites spec sections"
    assert sorted(cited - _explained_sections()) == []


def test_the_operators_guide_names_every_setting() -> None:
    guide = (DOCS / "operators.md").read_text(encoding="utf-8")
    missing = [f"DPMINE_{name.upper()}" for name in Settings.model_fields]
    assert [name for name in missing if name not in guide] == []
