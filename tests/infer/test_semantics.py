"""The rule language's semantics, shared by the engines and `explain`."""

from __future__ import annotations

from rltriage.infer.fact import Cited, Fact, equality_key, fact_key
from rltriage.infer.registry import get_engine
from rltriage.infer.semantics import apply_operator, cited_evidence, resolve_field
from rltriage.kb.models import Rule


def test_loose_equality_and_ordering() -> None:
    assert apply_operator("eq", "8", 8, True) and apply_operator("eq", True, "true", True)
    assert not apply_operator("eq", "8", 9, True)
    assert apply_operator("gt", "1,024", 1000, True) and not apply_operator("gt", "x", 1, True)
    assert apply_operator("in", 2.0, [1, "2"], True) and apply_operator("not_in", 3, [1, 2], True)
    assert apply_operator("version_lt", "5.4.0-150-generic", "5.5.0", True)
    assert apply_operator("multiple_of", 12, 4, True) and apply_operator("not_multiple_of", 10, 4, True)
    assert apply_operator("matches", "actor.rollout.n", r"(^|\.)rollout\.n$", True)


def test_absent_fields() -> None:
    assert apply_operator("exists", None, False, False) and not apply_operator("exists", None, True, False)
    assert apply_operator("ne", None, 1, False) and not apply_operator("eq", None, None, False)


def test_equal_values_share_an_equality_key() -> None:
    assert equality_key(1) == equality_key("1") == equality_key(1.0) == equality_key(True)
    assert equality_key("a") != equality_key("b")
    assert fact_key("hit", {"a": [1, 2]}) == fact_key("hit", {"a": [1, 2]})


def test_derived_fields_from_references_and_templates() -> None:
    fact = Fact(0, "hit", {"n": 3, "name": "x"})
    bindings = {"h": fact}
    assert resolve_field("$h.n", bindings) == 3
    assert resolve_field("{{ h.n + 1 }}", bindings) == 4
    assert resolve_field("{{ h.missing is defined }}", bindings) is False
    assert resolve_field("{{ '' }}", bindings) is None
    assert resolve_field("plain", bindings) == "plain"


def test_cited_evidence_is_deduplicated() -> None:
    ev = Cited(path="a.log", line=3, text="x", signature="s")
    bindings = {"a": Fact(0, "hit", {}, (ev,)), "b": Fact(1, "hit", {}, (ev,))}
    rule = Rule.model_validate(
        {"id": "a.b", "title": "abc", "role": "derive", "source": "test", "when": {"all": [{"fact": "hit"}]}, "then": {"derive": [{"fact": "x"}]}}
    )
    assert cited_evidence(rule, None, bindings) == (ev,)
    assert cited_evidence(rule, ["b"], bindings) == (ev,)
    assert cited_evidence(rule, ["c"], bindings) == ()


def test_the_registry_names_engines() -> None:
    assert get_engine("default").name == "default"
    try:
        get_engine("nope")
    except ValueError as exc:
        assert "unknown engine 'nope'" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("an unknown engine must be refused")


def test_numbers_in_long_and_short_text_alike() -> None:
    padded = " " * 100 + "1,024" + " " * 100  # past the length up to which texts are remembered
    assert apply_operator("eq", padded, 1024, True) and apply_operator("eq", padded.strip(), 1024, True)
    assert not apply_operator("gt", "x" * 200, 1, True)


def test_a_pattern_disabled_in_a_run_matches_nothing_even_on_a_text_it_matched() -> None:
    from rltriage.kb.regexes import compile_bounded, patterns_run, timed_out

    pattern = compile_bounded("rank [0-9]+ failed", "rule t: summary matches")
    with patterns_run(reuse=False) as run:
        assert apply_operator("matches", "rank 3 failed", None, True, pattern)
        assert apply_operator("matches", "rank 3 failed", None, True, pattern)  # remembered
        assert not apply_operator("matches", "rank 3 ok", None, True, pattern)
        assert apply_operator("matches", "rank 4 failed", None, True, pattern)
        assert run.last_found[pattern] == ("rank 4 failed", True)
        assert timed_out(pattern)  # as when one of its searches gives up
        assert not apply_operator("matches", "rank 4 failed", None, True, pattern)
    with patterns_run(reuse=False):
        assert apply_operator("matches", "rank 4 failed", None, True, pattern)  # a new run starts afresh
