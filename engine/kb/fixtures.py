"""Fixture runs: realistic runs of a rule pack with their expected diagnosis, nested by the
namespace of the rule they are about (`fixtures/<namespace>/<case>/`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..base.values import plain
from .knowledge import KnowledgeBase
from .models import FixtureExpectation
from .yamlio import load_yaml, validation_problems

EXPECT_FILE = "expect.yaml"


def fixture_dirs(kb: KnowledgeBase) -> list[Path]:
    found = []
    for root in kb.fixture_dirs:
        found.extend(sorted(p.parent for p in root.rglob(EXPECT_FILE)))
    return found


def fixture_name(folder: Path) -> str:
    """A fixture's name: its path below the pack's fixtures folder (`nccl/setup_hang`)."""
    parts = folder.resolve().parts
    if "fixtures" in parts:
        index = len(parts) - 1 - parts[::-1].index("fixtures")
        return "/".join(parts[index + 1 :])
    return folder.name


def read_expectation(folder: Path) -> FixtureExpectation:
    path = folder / EXPECT_FILE
    tree, problems = load_yaml(path, str(path))
    if problems:
        raise ValueError(str(problems[0]))
    try:
        return FixtureExpectation.model_validate(plain(tree))
    except ValidationError as exc:
        raise ValueError("; ".join(str(p) for p in validation_problems(exc, tree, str(path)))) from None


def run_inputs(folder: Path) -> list[str]:
    return [str(p) for p in sorted(folder.iterdir()) if p.name != EXPECT_FILE]
