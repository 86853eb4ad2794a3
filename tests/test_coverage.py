"""docs/coverage.md maps every source-document entry to rules and fixtures; keep it true."""

from __future__ import annotations

import re
from functools import cache

import pytest

import rltriage
from rltriage.kb.fixtures import read_expectation, run_inputs
from rltriage.pipeline.run import analyse

from .conftest import FIXTURES, REPO

ROW = re.compile(r"^\| (?P<key>[A-Z]\d+) \| (?P<source>[^|]+) \| (?P<text>.*?) \| (?P<rules>(?:`[\w.]+` ?)+) \| (?P<fixtures>(?:`[\w./-]+` ?)*) \|$")


def rows() -> list[dict[str, object]]:
    found = []
    for line in (REPO / "docs" / "coverage.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            found.append(
                {
                    "key": match.group("key"),
                    "rules": re.findall(r"`([\w.]+)`", match.group("rules")),
                    "fixtures": re.findall(r"`([\w./-]+)`", match.group("fixtures")),
                }
            )
    return found


ROWS = rows()


@cache
def fired(fixture: str) -> frozenset[str]:
    folder = FIXTURES / fixture
    expect = read_expectation(folder)
    analysis = analyse(run_inputs(folder), mode=expect.mode)
    return frozenset(f.rule for f in analysis.inference.firings)


def test_every_source_entry_has_a_row() -> None:
    keys = {str(r["key"]) for r in ROWS}
    wanted = {f"T{i}" for i in range(1, 10)} | {f"H{i}" for i in range(1, 6)} | {f"D{i}" for i in range(1, 34)} | {f"L{i}" for i in range(34, 50)}
    assert not sorted(wanted - keys), f"entries without a row: {sorted(wanted - keys)}"


@pytest.mark.parametrize("row", ROWS, ids=[str(r["key"]) for r in ROWS])
def test_row_rules_exist_and_a_fixture_proves_them(row: dict[str, object], kb: rltriage.KnowledgeBase) -> None:
    rules = list(row["rules"])  # type: ignore[call-overload]
    fixtures = list(row["fixtures"])  # type: ignore[call-overload]
    assert rules, "an entry without a rule"
    assert fixtures, "an entry without a fixture"
    known = {r.id for r in kb.rules}
    assert not [r for r in rules if r not in known], "rules that do not exist"
    for fixture in fixtures:
        assert (FIXTURES / fixture / "expect.yaml").is_file(), f"fixture {fixture} does not exist"
        assert fired(fixture) & set(rules), f"fixture {fixture} fires none of {rules}"


def test_every_concluding_rule_is_on_the_map(kb: rltriage.KnowledgeBase) -> None:
    mapped = {rule for row in ROWS for rule in row["rules"]}  # type: ignore[attr-defined]
    missing = sorted(r.id for r in kb.rules if r.model.concludes and r.id not in mapped)
    assert not missing, f"rules that conclude a cause but map to no entry: {missing}"
