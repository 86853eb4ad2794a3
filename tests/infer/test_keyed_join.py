"""The join looks up the options of a position by their `eq` join value: it gives exactly the tuples,
in exactly the order, that trying every option gives, and it stays linear where that is quadratic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.infer import default
from rltriage.infer.default import Store, _join
from rltriage.kb.compile import Check, CompiledPattern

# Values the rule language compares loosely: 1 == "1" == 1.0 == True, "true" == True.
VALUES = st.sampled_from([0, 1, 2, "1", "2", 1.0, 2.5, True, False, "true", "x", "X", None, [1], {"a": 1}])
FIELDS = st.dictionaries(st.sampled_from(["path", "pid", "line"]), VALUES, max_size=3)


@dataclass(frozen=True)
class _Rule:
    slots: tuple[tuple[CompiledPattern, ...], ...]


def _pattern(type_: str, alias: str, *checks: Check) -> CompiledPattern:
    return CompiledPattern(type=type_, alias=alias, checks=checks, source=None)  # type: ignore[arg-type]


def _rule(shape: int) -> _Rule:
    failure = _pattern("failure", "f")
    by_path = _pattern("hit", "t", Check("path", "eq", ref=("f", "path")), Check("line", "gt", ref=("f", "line")))
    by_pid = _pattern("hit", "t", Check("pid", "eq", ref=("f", "pid")))
    free = _pattern("dump", "t", Check("pid", "ne", ref=("f", "pid")))
    if shape == 0:  # one pattern joined by path
        return _Rule(((failure,), (by_path,)))
    if shape == 1:  # alternatives: two joins and one without an `eq` join
        return _Rule(((failure,), (by_path, by_pid, free)))
    if shape == 2:  # the joined fact comes from alternatives with different aliases: not surely bound
        either = (_pattern("failure", "f"), _pattern("dump", "g"))
        return _Rule((either, (by_path, by_pid)))
    # three positions: the third joins both earlier ones
    third = _pattern("dump", "d", Check("pid", "eq", ref=("t", "pid")), Check("path", "eq", ref=("f", "path")))
    return _Rule(((failure,), (by_path, by_pid), (third,)))


def _tuples(store: Store, rule: _Rule, low: int, high: int) -> list[list[tuple[str, int]]]:
    return [[(alias, fact.id) for alias, (_pattern, fact) in bound.items()] for bound in _join(store, rule, low, high)]  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    facts=st.lists(st.tuples(st.sampled_from(["failure", "hit", "dump"]), FIELDS), max_size=40),
    shape=st.integers(0, 3),
    split=st.integers(0, 40),
)
def test_keyed_join_gives_the_tuples_of_the_full_product(facts: list[tuple[str, dict[str, Any]]], shape: int, split: int) -> None:
    store = Store({})
    for number, (type_, fields) in enumerate(facts):
        store.add(type_, {**fields, "n": number}, ())
    rule = _rule(shape)
    low, high = min(split, len(store.facts)), len(store.facts)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(default, "_KEYED_FROM", 0)  # every position with a join is keyed
        keyed = _tuples(store, rule, low, high)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(default, "_KEYED_FROM", 10**9)  # no position is: every option is tried
        tried = _tuples(store, rule, low, high)
    assert keyed == tried


def test_a_join_on_the_same_path_stays_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 failures and 300 hits, one pair per path: trying every hit with every failure is 90,000 checks.
    store = Store({})
    for rank in range(300):
        store.add("failure", {"path": f"rank{rank}.log", "line": 10}, ())
    for rank in range(300):
        store.add("hit", {"path": f"rank{rank}.log", "line": 20 + rank % 2}, ())
    tried = 0
    refs_match = default.refs_match

    def counted(*args: Any) -> bool:
        nonlocal tried
        tried += 1
        return refs_match(*args)

    monkeypatch.setattr(default, "refs_match", counted)
    tuples = _tuples(store, _rule(0), 0, len(store.facts))
    assert len(tuples) == 300
    assert all(store.facts[f].fields["path"] == store.facts[t].fields["path"] for (_f, f), (_t, t) in tuples)
    assert tried <= 2 * 300 * 2  # each failure, and each hit once per pivot
