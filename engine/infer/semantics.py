"""The rule language's semantics, shared by every engine and by `explain`: loose comparisons,
operators, single-fact checks, joins by reference, tests, derived fields and cited evidence."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ..base.values import RENDERED_WORDS, coerce_scalar, number, version_key
from ..kb.compile import SANDBOX, Check, CompiledPattern, CompiledRule
from ..kb.models import Rule
from ..kb.regexes import REGEX_TIMEOUT, BoundedPattern, compile_value, note, timed_out
from ..kb.sandbox import bounded, evaluate, render_bounded
from .fact import Cited, Fact

MAX_FIELD = 4096  # characters of a derived field's rendered value


def _equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    na, nb = number(a), number(b)
    return na is not None and nb is not None and na == nb


def _order(op: str, a: Any, b: Any) -> bool:
    na, nb = number(a), number(b)
    if na is None or nb is None:
        return False
    return {"gt": na > nb, "ge": na >= nb, "lt": na < nb, "le": na <= nb}[op]


def _multiple(a: Any, b: Any) -> bool | None:
    na, nb = number(a), number(b)
    if na is None or nb is None or nb == 0:
        return None
    return na % nb == 0


def _matches(pattern: BoundedPattern | None, actual: Any) -> bool:
    """The one timeout-guarded matcher for `matches:` (the signatures' own): a pattern that times out
    matches nothing and is disabled for the rest of the run, with one warning."""
    if pattern is None or actual is None:
        return False
    try:
        return pattern.found(str(actual))
    except TimeoutError:
        if timed_out(pattern):
            note(pattern.where or "rules", f"{pattern.name}: gave up after {REGEX_TIMEOUT}s; disabled for the rest of the run")
        return False


def apply_operator(op: str, actual: Any, expected: Any, present: bool, pattern: BoundedPattern | None = None) -> bool:
    if op == "exists":
        return present == bool(expected)
    if not present:
        return op in ("ne", "not_in")
    if op == "eq":
        return _equal(actual, expected)
    if op == "ne":
        return not _equal(actual, expected)
    if op in ("gt", "ge", "lt", "le"):
        return _order(op, actual, expected)
    if op == "in":
        return any(_equal(actual, e) for e in expected)
    if op == "not_in":
        return not any(_equal(actual, e) for e in expected)
    if op == "matches":
        return _matches(pattern or compile_value(str(expected)), actual)
    if op == "contains":
        return actual is not None and str(expected) in str(actual)
    if op == "version_lt":
        key = version_key(actual)
        return bool(key) and key < version_key(expected)
    if op == "version_ge":
        key = version_key(actual)
        return bool(key) and key >= version_key(expected)
    if op == "multiple_of":
        return _multiple(actual, expected) is True
    if op == "not_multiple_of":
        return _multiple(actual, expected) is False
    raise ValueError(f"unknown operator {op}")  # pragma: no cover - the model restricts operators


def field_value(fact: Fact, name: str) -> tuple[bool, Any]:
    if name in fact.fields:
        return True, fact.fields[name]
    return False, None


def check_passes(check: Check, fact: Fact, bindings: Mapping[str, Fact]) -> bool | None:
    """None when the check refers to an alias that is not bound yet."""
    present, actual = field_value(fact, check.field)
    if check.ref is None:
        expected = check.value
    else:
        other = bindings.get(check.ref[0])
        if other is None:
            return None
        ref_present, expected = field_value(other, check.ref[1])
        if not ref_present and check.op != "exists":
            return False
    return apply_operator(check.op, actual, expected, present, check.pattern if check.ref is None else None)


def literal_match(pattern: CompiledPattern, fact: Fact) -> bool:
    return fact.type == pattern.type and all(check_passes(c, fact, {}) for c in pattern.literal_checks)


def refs_match(pattern: CompiledPattern, fact: Fact, bindings: Mapping[str, Fact]) -> bool:
    return all(check_passes(c, fact, bindings) is not False for c in pattern.ref_checks)


def refs_complete(pattern: CompiledPattern, fact: Fact, bindings: Mapping[str, Fact]) -> bool:
    return all(check_passes(c, fact, bindings) is True for c in pattern.ref_checks)


def binding_view(bindings: Mapping[str, Fact]) -> dict[str, dict[str, Any]]:
    return {alias: dict(fact.fields) for alias, fact in bindings.items() if not alias.startswith("_")}


def tests_pass(rule: CompiledRule, bindings: Mapping[str, Fact]) -> tuple[bool, str | None]:
    context = {alias: dict(fact.fields) for alias, fact in bindings.items()}
    for text, expression in rule.tests:
        try:
            if not evaluate(expression, context):
                return False, text
        except Exception:  # noqa: BLE001 - a test that cannot be evaluated on these facts is false
            return False, text
    return True, None


def resolve_field(value: Any, bindings: Mapping[str, Fact]) -> Any:
    if isinstance(value, str) and value.startswith("$") and "." in value and " " not in value:
        alias, _, attr = value[1:].partition(".")
        fact = bindings.get(alias)
        return fact.fields.get(attr) if fact is not None else None
    if isinstance(value, str) and "{{" in value:
        context = {alias: dict(fact.fields) for alias, fact in bindings.items()}
        try:
            rendered = render_bounded(_field_template(value), context, limit=MAX_FIELD).strip()
        except Exception:  # noqa: BLE001 - a field that cannot be rendered (or is too large) is absent
            return None
        return coerce_scalar(rendered, RENDERED_WORDS)
    return value


@functools.lru_cache(maxsize=4096)
def _field_template(text: str) -> Any:
    return bounded(lambda: SANDBOX.from_string(text))


def cited_evidence(rule: Rule, cite: list[str] | None, bindings: Mapping[str, Fact]) -> tuple[Cited, ...]:
    aliases = cite if cite is not None else [a for a in bindings]
    seen: set[tuple[str, int]] = set()
    out: list[Cited] = []
    for alias in aliases:
        fact = bindings.get(alias)
        if fact is None:
            continue
        for ev in fact.evidence:
            if (ev.path, ev.line) not in seen:
                seen.add((ev.path, ev.line))
                out.append(ev)
    return tuple(out)


def negation_blocker(store_facts: Iterable[Fact], pattern: CompiledPattern, bindings: Mapping[str, Fact]) -> Fact | None:
    for fact in store_facts:
        if literal_match(pattern, fact) and refs_complete(pattern, fact, bindings):
            return fact
    return None
