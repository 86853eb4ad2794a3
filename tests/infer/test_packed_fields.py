"""Packed fields (the read-only mapping the pipeline gives input and hit facts) behave as the dict
they replace: same lookups, same equality, same fact key, and the store keeps them as given."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.infer.default import Store
from rltriage.infer.fact import PackedFields, fact_key

names = st.sampled_from(["path", "kind", "lines", "count", "last_step"])
values = st.one_of(st.integers(-3, 300), st.text(max_size=3), st.none(), st.booleans(), st.floats(allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, values, max_size=5), names)
def test_packed_fields_read_as_their_dict(fields: dict[str, Any], probe: str) -> None:
    packed = PackedFields(fields)
    assert packed == fields and fields == packed
    assert list(packed) == list(fields) and list(packed.items()) == list(fields.items())
    assert len(packed) == len(fields)
    assert (probe in packed) == (probe in fields)
    assert packed.get(probe, "absent") == fields.get(probe, "absent")
    assert dict(packed) == fields
    assert fact_key("hit", packed) == fact_key("hit", fields)
    if probe not in fields:
        try:
            packed[probe]
        except KeyError:
            pass
        else:
            raise AssertionError(f"{probe!r} found in {packed!r}")


def test_facts_of_one_shape_share_their_table_of_names() -> None:
    one = PackedFields({"path": "a.log", "kind": "log", "lines": 3})
    two = PackedFields({"path": "b.log", "kind": "log", "lines": 4})
    other_order = PackedFields({"kind": "log", "path": "c.log", "lines": 5})
    assert one._names is two._names
    assert other_order._names is not one._names
    assert list(other_order) == ["kind", "path", "lines"]


def test_the_store_keeps_packed_fields_as_asserted_and_merges_their_equal_dict() -> None:
    store = Store({})
    packed = PackedFields({"path": "a.log", "lines": 3})
    fact = store.add("input", packed, ())
    assert fact is not None and fact.fields is packed
    # The same fields as a plain dict are the same fact (set semantics across both kinds).
    assert store.add("input", {"path": "a.log", "lines": 3}, ()) is None
    assert store.add("input", {"path": "a.log", "lines": 4}, ()) is not None
    assert len(store.facts) == 2
