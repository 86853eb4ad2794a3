"""Tests that police the whole knowledge base."""

from __future__ import annotations

import re

from rltriage import KnowledgeBase
from rltriage.kb.fixtures import read_expectation
from rltriage.kb.models import ID_PATTERN

from .conftest import all_fixtures


def test_ids_are_namespaced_and_unique(kb: KnowledgeBase) -> None:
    rule_ids = [r.id for r in kb.rules]
    assert len(rule_ids) == len(set(rule_ids))
    for item in rule_ids + list(kb.signatures):
        assert re.match(ID_PATTERN, item), item


def test_every_rule_has_a_fixture_that_fires_it_and_one_that_must_not(kb: KnowledgeBase) -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for folder in all_fixtures():
        expect = read_expectation(folder)
        fires.update(expect.fires)
        quiet.update(expect.not_fires)
    missing_fire = sorted(r.id for r in kb.rules if r.id not in fires)
    missing_quiet = sorted(r.id for r in kb.rules if r.id not in quiet)
    assert not missing_fire, f"rules no fixture expects to fire: {missing_fire}"
    assert not missing_quiet, f"rules no fixture expects to stay quiet: {missing_quiet}"


def test_fixture_expectations_name_known_rules(kb: KnowledgeBase) -> None:
    known = {r.id for r in kb.rules}
    for folder in all_fixtures():
        expect = read_expectation(folder)
        for rule in [*expect.fires, *expect.not_fires, *expect.top3, *([expect.first_cause] if expect.first_cause else [])]:
            assert rule in known, f"{folder.name}: unknown rule {rule}"


def test_every_signature_is_used_by_a_rule(kb: KnowledgeBase) -> None:
    used: set[str] = set()
    for loaded in kb.rules:
        for pattern in [*loaded.model.when.all, *loaded.model.when.any, *loaded.model.when.none]:
            if pattern.fact == "hit":
                value = pattern.where.get("signature")
                used.update(value if isinstance(value, list) else [value])  # type: ignore[list-item]
    orphans = sorted(set(kb.signatures) - used)
    assert not orphans, f"signatures no rule uses: {orphans}"


def test_every_concluding_rule_says_what_it_is(kb: KnowledgeBase) -> None:
    for loaded in kb.rules:
        model = loaded.model
        if model.concludes:
            assert model.issue and model.reason, f"{loaded.id}: concluding rules carry issue and reason"


def test_the_shipped_knowledge_base_is_lint_clean() -> None:
    """Every template renders with its rule's fields, every example holds, no regex backtracks,
    nothing is orphaned or refers to a deprecated id."""
    from rltriage.tools.lint import lint

    problems = lint()
    assert not problems, "\n".join(str(p) for p in problems)
