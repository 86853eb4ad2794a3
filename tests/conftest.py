from __future__ import annotations

from pathlib import Path

import pytest

import rltriage
from rltriage import KnowledgeBase
from rltriage.kb.fixtures import fixture_dirs

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return rltriage.load_knowledge_base()


def all_fixtures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.rglob("expect.yaml"))


def builtin_fixture_dirs() -> list[Path]:
    return fixture_dirs(rltriage.load_knowledge_base())
