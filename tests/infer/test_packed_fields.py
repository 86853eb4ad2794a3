"""Packed fields (the read-only mapping the pipeline gives input and hit facts) behave as the dict
they replace: same lookups, same equality, same fact key, and the store keeps them as given."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.infer.default import Store
from rltriage.infer.fact import FieldView, PackedFields, fact_key

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
    assert one._table is two._table
    assert other_order._table is not one._table
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


# --- Field views: fields read from the objects they come from ---------------------------------------

TABLE = {"path": lambda scan, tally: scan["path"], "count": lambda scan, tally: tally["count"], "kind": lambda scan, tally: scan["kind"]}


def test_a_field_view_reads_as_the_dict_of_what_it_reads() -> None:
    view = FieldView(TABLE, {"path": "a.log", "kind": "log"}, {"count": 3})
    fields = {"path": "a.log", "count": 3, "kind": "log"}
    assert view == fields and dict(view) == fields and list(view) == ["path", "count", "kind"] and len(view) == 3
    assert view["count"] == 3 and view.get("count") == 3 and view.get("lines", "absent") == "absent" and "lines" not in view
    assert fact_key("hit", view) == fact_key("hit", fields) and repr(view) == repr(fields)
    try:
        view["lines"]
    except KeyError:
        pass
    else:
        raise AssertionError("a name outside the table was read")


def test_the_store_keeps_a_field_view_as_asserted_and_merges_its_equal_dict() -> None:
    store = Store({})
    view = FieldView(TABLE, {"path": "a.log", "kind": "log"}, {"count": 3})
    fact = store.add("hit", view, ())
    assert fact is not None and fact.fields is view
    assert store.add("hit", {"path": "a.log", "count": 3, "kind": "log"}, ()) is None
    assert store.add("hit", {"path": "a.log", "count": 4, "kind": "log"}, ()) is not None
