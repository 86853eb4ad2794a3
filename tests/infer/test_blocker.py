"""The store's indexed negation check finds a blocker exactly when a scan of every fact does."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.infer.default import Store
from rltriage.infer.fact import Fact
from rltriage.infer.semantics import negation_blocker
from rltriage.kb.compile import Check, CompiledPattern

# Values the rule language compares loosely: 1 == "1" == 1.0 == True.
VALUES = st.sampled_from([0, 1, 2, "1", "2", 1.0, 2.5, True, False, "true", "x", "X", None])
FIELDS = st.dictionaries(st.sampled_from(["pid", "rank", "kind"]), VALUES, max_size=3)


def _pattern(op: str, second: str | None) -> CompiledPattern:
    checks = [Check(field="kind", op="ne", value="x"), Check(field="pid", op=op, ref=("h", "pid"))]
    if second is not None:
        checks.append(Check(field="rank", op=second, ref=("h", "rank")))
    return CompiledPattern(type="dump", alias="", checks=tuple(checks), source=None)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    facts=st.lists(FIELDS, max_size=12),
    bound=FIELDS,
    op=st.sampled_from(["eq", "ne", "gt"]),
    second=st.sampled_from([None, "eq", "ne"]),
    split=st.integers(0, 12),
)
def test_indexed_blocker_agrees_with_a_full_scan(facts: list[dict[str, Any]], bound: dict[str, Any], op: str, second: str | None, split: int) -> None:
    store = Store({})
    pattern = _pattern(op, second)
    binding = {"h": Fact(10_000, "hang", bound)}
    # Facts arrive in two rounds, with a check in between: the index must take in the late ones.
    for number, fields in enumerate(facts):
        if number == split:
            _agree(store, pattern, binding)
        store.add("dump", {**fields, "n": number}, ())
        store.add("other", {**fields, "n": number}, ())
    _agree(store, pattern, binding)


def _agree(store: Store, pattern: CompiledPattern, binding: dict[str, Fact]) -> None:
    expected = negation_blocker(store.by_type.get("dump", ()), pattern, binding)
    found = store.blocker(pattern, binding)
    assert (found is None) == (expected is None)
    if found is not None:
        assert negation_blocker([found], pattern, binding) is found  # what it found does block


def test_many_dumps_negating_each_other_stay_linear() -> None:
    # 2,000 facts each checked against the others: a scan per binding would make 4 million checks.
    store = Store({})
    pattern = _pattern("eq", None)
    for number in range(2000):
        store.add("dump", {"pid": number, "kind": "py-spy"}, ())
    calls = 0
    for number in range(2000):
        calls += store.blocker(pattern, {"h": Fact(10_000 + number, "hang", {"pid": number})}) is not None
    assert calls == 2000
    seen, by_value = store.negated[id(pattern)]
    assert seen == [2000] and max(len(facts) for facts in by_value.values()) == 1
