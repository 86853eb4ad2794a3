from __future__ import annotations

from pathlib import Path

import pytest

import rltriage
from rltriage import KnowledgeBase
from rltriage.kb.fixtures import fixture_dirs, run_inputs
from rltriage.pipeline.render import format_diagnosis
from rltriage.pipeline.run import analyse

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return rltriage.load_knowledge_base()


def all_fixtures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("expect.yaml"))


def builtin_fixture_dirs() -> list[Path]:
    return fixture_dirs(rltriage.load_knowledge_base())


class RenderedFixture:
    """A fixture diagnosed once per test session, with its html details and page."""

    def __init__(self, folder: Path, kb: KnowledgeBase) -> None:
        self.folder = folder
        self.name = str(folder.relative_to(FIXTURES))
        self.analysis = analyse(run_inputs(folder), kb=kb)
        self.details = self.analysis.details()
        self.html = format_diagnosis(self.analysis.diagnosis, "html", kb, details=lambda: self.details)


_RENDERED: dict[Path, RenderedFixture] = {}


def rendered(folder: Path, kb: KnowledgeBase) -> RenderedFixture:
    """The fixture's analysis, details and html page, made once for every test that asks."""
    if folder not in _RENDERED:
        _RENDERED[folder] = RenderedFixture(folder, kb)
    return _RENDERED[folder]
