"""The store keeps facts by the hash of their key: facts whose keys share a hash stay apart, and a
fact asserted again is still found (set semantics), whichever of the two it is."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.infer.default import Store
from rltriage.infer.fact import Cited, fact_key


def _evidence(line: int) -> tuple[Cited, ...]:
    return (Cited(path="train.log", line=line, text="x", signature="s"),)


def test_keys_with_one_hash_are_two_facts() -> None:
    # CPython hashes -1 and -2 alike, so the two keys (and the tuples holding them) collide.
    first, second = {"value": -1}, {"value": -2}
    assert hash(fact_key("f", first)) == hash(fact_key("f", second))
    store = Store({})
    assert store.add("f", first, _evidence(1)) is not None
    assert store.add("f", second, _evidence(2)) is not None
    assert [fact.fields["value"] for fact in store.facts] == [-1, -2]
    # Asserted again, each is merged into its own fact, with the new proof line.
    assert store.add("f", {"value": -2}, _evidence(3)) is None
    assert store.add("f", {"value": -1}, _evidence(4)) is None
    assert len(store.facts) == 2
    assert [e.line for e in store.facts[0].evidence] == [1, 4]
    assert [e.line for e in store.facts[1].evidence] == [2, 3]


values = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "-1"]), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["x", "y"]), values, max_size=2), max_size=30))
def test_one_fact_per_distinct_key(asserted: list[dict[str, Any]]) -> None:
    store = Store({})
    for fields in asserted:
        store.add("f", dict(fields), ())
    assert len(store.facts) == len({fact_key("f", fields) for fields in asserted})
