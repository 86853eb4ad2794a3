"""Stage 4 — infer: forward chaining of the rules over the facts.

One small engine interface, `Engine.run(program, facts) -> Inference`. The default engine is a
stratified, semi-naive forward chainer:

* rules are ordered into strata so that a rule that negates a fact type runs only after every rule
  that can produce that type — negation is order-independent by construction;
* within a stratum only tuples that contain at least one new fact are matched (semi-naive);
* facts have set semantics (type plus fields), a rule fires once per tuple of facts;
* order is deterministic: stratum, priority, rule id, fact ids in scan order;
* a firing budget turns a runaway chain into an InferenceError naming the rule.

The engine keeps no state between runs, so one compiled program is shared by any number of threads.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import InferenceError, Problem
from .models import Constraint, Operators, Pattern, Rule
from .result import Evidence
from .vocabulary import NEXT_STAGE, STAGE_ORDER

if TYPE_CHECKING:
    from .load import KnowledgeBase, LoadedRule

DEFAULT_BUDGET = 50_000

# Fact types the pipeline asserts before any rule runs, with the fields they always carry.
BASE_FACTS: dict[str, tuple[str, ...]] = {
    "hit": ("signature", "path", "kind", "count", "line", "text", "rank", "ranks", "timestamp"),
    # Frame signatures' hits carry where in which stack they matched, besides the hit fields.
    "frame_hit": ("process", "thread", "main", "depth", "stack", "dump", "state"),
    "config": ("key", "name", "value", "path", "line", "source"),
    "package": ("name", "version", "path", "line"),
    "kernel": ("version", "path", "line"),
    "input": ("path", "kind", "lines"),
    "stage_def": ("name", "order", "next"),
    "stack": ("path", "process", "thread", "main", "kind", "top", "depth", "line", "stack"),
    "stack_outlier": ("path", "process", "thread", "top", "line", "majority_top", "majority_count", "total"),
    "run": ("mode", "inputs", "logs", "log_lines"),
}


def version_key(value: Any) -> tuple[int, ...]:
    match = re.search(r"\d+(?:\.\d+)*", str(value))
    if not match:
        return ()
    parts = tuple(int(p) for p in match.group(0).split("."))
    return parts + (0,) * (4 - len(parts)) if len(parts) < 4 else parts


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    return None


def _equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    na, nb = _number(a), _number(b)
    return na is not None and nb is not None and na == nb


def _order(op: str, a: Any, b: Any) -> bool:
    na, nb = _number(a), _number(b)
    if na is None or nb is None:
        return False
    return {"gt": na > nb, "ge": na >= nb, "lt": na < nb, "le": na <= nb}[op]


def _multiple(a: Any, b: Any) -> bool | None:
    na, nb = _number(a), _number(b)
    if na is None or nb is None or nb == 0:
        return None
    return na % nb == 0


def apply_operator(op: str, actual: Any, expected: Any, present: bool) -> bool:
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
        return actual is not None and re.search(str(expected), str(actual)) is not None
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


@dataclass(frozen=True, eq=False)
class Fact:
    id: int
    type: str
    fields: Mapping[str, Any]
    evidence: tuple[Evidence, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        return fact_key(self.type, self.fields)

    def get(self, name: str) -> Any:
        return self.fields.get(name)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def equality_key(value: Any) -> Any:
    """A hash key that equal values (in the rule language's loose sense: 1 == "1" == 1.0,
    True == "true") share. Values with the same key may still differ; candidates found through
    the key are re-checked with the operators, so the key only has to over-approximate."""
    if isinstance(value, bool):
        return ("n", 1.0 if value else 0.0)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return ("n", 1.0 if value.lower() == "true" else 0.0)
    if isinstance(value, (int, float, str)):
        try:
            number = _number(value)
        except OverflowError:
            number = None
        if number is not None:
            return ("n", number + 0.0)  # -0.0 and 0.0 share a key
    return ("o", _hashable(value))


def fact_key(type_: str, fields: Mapping[str, Any]) -> tuple[Any, ...]:
    return (type_, tuple(sorted((k, _hashable(v)) for k, v in fields.items())))


@dataclass(frozen=True)
class Check:
    field: str
    op: str
    value: Any = None
    ref: tuple[str, str] | None = None  # (alias, field) when the value names another fact


@dataclass(frozen=True)
class CompiledPattern:
    type: str
    alias: str
    checks: tuple[Check, ...]
    source: Pattern

    @property
    def literal_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.ref is None)

    @property
    def ref_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.ref is not None)

    def describe(self) -> str:
        parts = []
        for c in self.checks:
            value = f"${c.ref[0]}.{c.ref[1]}" if c.ref else repr(c.value)
            parts.append(f"{c.field}={value}" if c.op == "eq" else f"{c.field} {c.op} {value}")
        return f"{self.type}({', '.join(parts)})"


@dataclass(frozen=True)
class CompiledRule:
    loaded: LoadedRule
    index: int
    stratum: int
    slots: tuple[tuple[CompiledPattern, ...], ...]
    negatives: tuple[CompiledPattern, ...]
    tests: tuple[tuple[str, Any], ...]

    @property
    def id(self) -> str:
        return self.loaded.id

    @property
    def model(self) -> Rule:
        return self.loaded.model


@dataclass(frozen=True)
class Program:
    rules: tuple[CompiledRule, ...]
    strata: tuple[tuple[CompiledRule, ...], ...]
    indexed: Mapping[str, frozenset[str]]


_sandbox = ImmutableSandboxedEnvironment()
_sandbox.globals.update(version_lt=lambda a, b: version_key(a) < version_key(b), version_key=version_key)


def _compile_checks(field_name: str, constraint: Constraint) -> list[Check]:
    def one(op: str, value: Any) -> Check:
        if isinstance(value, str) and value.startswith("$") and "." in value:
            alias, _, attr = value[1:].partition(".")
            return Check(field_name, op, None, (alias, attr))
        return Check(field_name, op, value)

    if isinstance(constraint, Operators):
        checks = []
        for name in Operators.model_fields:
            value = getattr(constraint, name)
            if name in constraint.model_fields_set:
                checks.append(one("in" if name == "one_of" else name, value))
        return checks
    if isinstance(constraint, list):
        return [Check(field_name, "in", constraint)]
    return [one("eq", constraint)]


def _compile_pattern(pattern: Pattern, default_alias: str) -> CompiledPattern:
    checks: list[Check] = []
    for name, constraint in sorted(pattern.where.items()):
        checks.extend(_compile_checks(name, constraint))
    return CompiledPattern(pattern.fact, pattern.alias or default_alias, tuple(checks), pattern)


def rule_patterns(rule: Rule) -> tuple[list[tuple[CompiledPattern, ...]], list[CompiledPattern]]:
    slots: list[tuple[CompiledPattern, ...]] = []
    for i, pattern in enumerate(rule.when.all):
        slots.append((_compile_pattern(pattern, f"_{i}"),))
    if rule.when.any:
        slots.append(tuple(_compile_pattern(p, p.alias or "any") for p in rule.when.any))
    negatives = [_compile_pattern(p, f"_not{i}") for i, p in enumerate(rule.when.none)]
    return slots, negatives


def produced_types(rule: Rule) -> set[str]:
    return {d.fact for d in rule.then.derive}


def compile_program(kb: KnowledgeBase, problems: list[Problem]) -> Program | None:
    """Compile and stratify the rules; stratification failures are knowledge-base problems."""
    compiled_parts = []
    for index, loaded in enumerate(kb.rules):
        slots, negatives = rule_patterns(loaded.model)
        tests = []
        for t_index, text in enumerate(loaded.model.when.test):
            try:
                tests.append((text, _sandbox.compile_expression(text)))
            except Exception as exc:  # noqa: BLE001 - any template syntax error is a rule problem
                line, col = loaded.origin.at("when", "test", t_index)
                problems.append(Problem(loaded.origin.display, line, col, "bad-test", f"test does not compile: {exc}"))
        compiled_parts.append((loaded, index, slots, negatives, tests))

    producers: dict[str, set[str]] = defaultdict(set)
    for loaded in kb.rules:
        for type_ in produced_types(loaded.model):
            producers[type_].add(loaded.id)
    stratum: dict[str, int] = {r.id: 0 for r in kb.rules}
    by_id = {r.id: r for r in kb.rules}
    limit = len(kb.rules) + 1
    changed = True
    rounds = 0
    while changed:
        changed = False
        rounds += 1
        for loaded, _index, slots, negatives, _tests in compiled_parts:
            need = stratum[loaded.id]
            for slot in slots:
                for pattern in slot:
                    for producer in producers.get(pattern.type, ()):
                        need = max(need, stratum[producer])
            for pattern in negatives:
                for producer in producers.get(pattern.type, ()):
                    need = max(need, stratum[producer] + 1)
            if need != stratum[loaded.id]:
                stratum[loaded.id] = need
                changed = True
        if rounds > limit:
            cyclic = sorted(rid for rid, level in stratum.items() if level >= limit - 1)
            for rid in cyclic[:5] or sorted(stratum)[:1]:
                loaded = by_id[rid]
                line, col = loaded.origin.at("when", "none")
                problems.append(
                    Problem(loaded.origin.display, line, col, "cyclic-negation", "rule takes part in a cycle through negation (it negates a fact that it helps derive)")
                )
            return None
    rules = tuple(
        CompiledRule(loaded, index, stratum[loaded.id], tuple(slots), tuple(negatives), tuple(tests))
        for loaded, index, slots, negatives, tests in compiled_parts
    )
    ordered = sorted(rules, key=lambda r: (r.stratum, -r.model.priority, r.id))
    strata: dict[int, list[CompiledRule]] = defaultdict(list)
    for rule in ordered:
        strata[rule.stratum].append(rule)
    indexed: dict[str, set[str]] = defaultdict(set)
    for rule in rules:
        for slot in rule.slots:
            for pattern in slot:
                for check in pattern.literal_checks:
                    if check.op in ("eq", "in"):
                        indexed[pattern.type].add(check.field)
    return Program(
        rules=tuple(ordered),
        strata=tuple(tuple(strata[k]) for k in sorted(strata)),
        indexed={k: frozenset(v) for k, v in indexed.items()},
    )


# ---------------------------------------------------------------------------------------------
# Results of a run


@dataclass(frozen=True)
class Firing:
    rule: str
    stratum: int
    facts: tuple[int, ...]
    bindings: Mapping[str, Mapping[str, Any]]
    derived: tuple[int, ...]
    weight: float | None
    cause: str | None
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class SuppressionRecord:
    rule: str
    bucket: str | None
    cause: str | None
    reason: str
    evidence: tuple[Evidence, ...]


@dataclass
class Inference:
    facts: list[Fact]
    firings: list[Firing]
    suppressions: list[SuppressionRecord]

    def facts_of(self, type_: str) -> list[Fact]:
        return [f for f in self.facts if f.type == type_]

    def fired(self, rule_id: str) -> bool:
        return any(f.rule == rule_id for f in self.firings)


@dataclass
class BaseFact:
    """A fact as the pipeline asserts it, before the engine numbers it."""

    type: str
    fields: dict[str, Any]
    evidence: tuple[Evidence, ...] = ()


class Engine(Protocol):
    name: str

    def run(self, program: Program, facts: Sequence[BaseFact], *, budget: int = DEFAULT_BUDGET) -> Inference: ...


def stage_definitions() -> list[BaseFact]:
    return [
        BaseFact("stage_def", {"name": stage.value, "order": STAGE_ORDER[stage], "next": nxt.value if nxt else None})
        for stage, nxt in NEXT_STAGE.items()
    ]


# ---------------------------------------------------------------------------------------------
# Shared matching semantics (used by every engine implementation and by `explain`)


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
    return apply_operator(check.op, actual, expected, present)


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
            if not expression(**context):
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
            rendered = _field_template(value).render(**context).strip()
        except Exception:  # noqa: BLE001
            return None
        return coerce(rendered)
    return value


@functools.lru_cache(maxsize=4096)
def _field_template(text: str) -> Any:
    return _sandbox.from_string(text)


def coerce(text: str) -> Any:
    if text in ("None", ""):
        return None
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def cited_evidence(rule: Rule, cite: list[str] | None, bindings: Mapping[str, Fact]) -> tuple[Evidence, ...]:
    aliases = cite if cite is not None else [a for a in bindings]
    seen: set[tuple[str, int]] = set()
    out: list[Evidence] = []
    for alias in aliases:
        fact = bindings.get(alias)
        if fact is None:
            continue
        for ev in fact.evidence:
            if (ev.path, ev.line) not in seen:
                seen.add((ev.path, ev.line))
                out.append(ev)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# The default engine


class _Store:
    def __init__(self, indexed: Mapping[str, frozenset[str]]) -> None:
        self.facts: list[Fact] = []
        self.by_type: dict[str, list[Fact]] = defaultdict(list)
        self.keys: dict[tuple[Any, ...], Fact] = {}
        self.indexed = indexed
        self.index: dict[tuple[str, str, Any], list[Fact]] = defaultdict(list)
        # Fact ids beside each list, kept sorted by construction, for bisecting a semi-naive range.
        self.ids: dict[int, list[int]] = {}

    def add(self, type_: str, fields: Mapping[str, Any], evidence: tuple[Evidence, ...]) -> Fact | None:
        key = fact_key(type_, fields)
        existing = self.keys.get(key)
        if existing is not None:
            # Set semantics: the fact exists already; keep the extra proof lines it was derived from.
            merged = list(existing.evidence)
            for ev in evidence:
                if len(merged) < 8 and all((e.path, e.line) != (ev.path, ev.line) for e in merged):
                    merged.append(ev)
            object.__setattr__(existing, "evidence", tuple(merged))
            return None
        fact = Fact(len(self.facts), type_, dict(fields), evidence)
        self.facts.append(fact)
        self._append(self.by_type[type_], fact)
        self.keys[key] = fact
        for name in self.indexed.get(type_, ()):
            if name in fact.fields:
                self._append(self.index[(type_, name, equality_key(fact.fields[name]))], fact)
        return fact

    def _append(self, facts: list[Fact], fact: Fact) -> None:
        facts.append(fact)
        self.ids.setdefault(id(facts), []).append(fact.id)

    def _ids(self, facts: list[Fact]) -> list[int]:
        return self.ids.get(id(facts)) or [f.id for f in facts]

    def candidates(self, pattern: CompiledPattern, low: int, high: int) -> list[Fact]:
        """Facts with ids in [low, high) that pass the pattern's literal checks."""
        pool: list[Fact] | None = None
        for check in pattern.literal_checks:
            if check.field in self.indexed.get(pattern.type, ()):
                if check.op == "eq":
                    pool = self.index.get((pattern.type, check.field, equality_key(check.value)), [])
                    break
                if check.op == "in":
                    merged: list[Fact] = []
                    for value in check.value:
                        merged.extend(self.index.get((pattern.type, check.field, equality_key(value)), []))
                    pool = sorted({f.id: f for f in merged}.values(), key=lambda f: f.id)
                    break
        if pool is None:
            pool = self.by_type.get(pattern.type, [])
        ids = self._ids(pool)
        start, stop = bisect.bisect_left(ids, low), bisect.bisect_left(ids, high)
        return [f for f in pool[start:stop] if literal_match(pattern, f)]


Bound = dict[str, tuple[CompiledPattern, Fact]]


def _join(store: _Store, rule: CompiledRule, delta_start: int, delta_end: int) -> Iterator[Bound]:
    """Semi-naive join: every tuple with at least one fact from [delta_start, delta_end)."""
    slots = rule.slots
    if not slots:
        if delta_start == 0:
            yield {}
        return
    for pivot in range(len(slots)):
        pools = []
        for position, slot in enumerate(slots):
            if position < pivot:
                low, high = 0, delta_start
            elif position == pivot:
                low, high = delta_start, delta_end
            else:
                low, high = 0, delta_end
            options = [(pattern, fact) for pattern in slot for fact in store.candidates(pattern, low, high)]
            options.sort(key=lambda pf: pf[1].id)
            pools.append(options)
        if all(pools):
            yield from _product(pools, 0, {})


def _product(pools: list[list[tuple[CompiledPattern, Fact]]], position: int, bound: Bound) -> Iterator[Bound]:
    if position == len(pools):
        yield dict(bound)
        return
    facts = {alias: fact for alias, (_p, fact) in bound.items()}
    for pattern, fact in pools[position]:
        if pattern.alias in bound or not refs_match(pattern, fact, facts):
            continue
        bound[pattern.alias] = (pattern, fact)
        yield from _product(pools, position + 1, bound)
        del bound[pattern.alias]


def refs_hold(bound: Bound) -> bool:
    facts = {alias: fact for alias, (_p, fact) in bound.items()}
    return all(refs_complete(pattern, fact, facts) for pattern, fact in bound.values())


def negation_blocker(store_facts: Iterable[Fact], pattern: CompiledPattern, bindings: Mapping[str, Fact]) -> Fact | None:
    for fact in store_facts:
        if literal_match(pattern, fact) and refs_complete(pattern, fact, bindings):
            return fact
    return None


def chain(program: Program, store: _Store, facts: Sequence[BaseFact], budget: int = DEFAULT_BUDGET) -> Inference:
    """The stratified semi-naive loop, shared by every engine; `store` decides single-fact matches."""
    for base in facts:
        store.add(base.type, base.fields, base.evidence)
    # The budget grows with the input (a rule may fire once per fact) but stays finite, so a
    # chain that derives new facts forever is still stopped.
    budget = max(budget, 8 * len(store.facts))
    firings: list[Firing] = []
    suppressions: list[SuppressionRecord] = []
    fired_keys: set[tuple[str, tuple[int, ...]]] = set()
    per_rule: Counter[str] = Counter()
    wanted = {rule.id: frozenset(p.type for slot in rule.slots for p in slot) for rule in program.rules}
    for stratum in program.strata:
        delta_start = 0
        delta_end = len(store.facts)
        while delta_start < delta_end:
            # A rule can only find a new tuple if one of its patterns wants a type that is new.
            new_types = {fact.type for fact in store.facts[delta_start:delta_end]}
            for rule in stratum:
                if wanted[rule.id] and wanted[rule.id].isdisjoint(new_types):
                    continue
                for bound in list(_join(store, rule, delta_start, delta_end)):
                    ids = tuple(fact.id for _pattern, fact in bound.values())
                    key = (rule.id, ids)
                    if key in fired_keys or not refs_hold(bound):
                        continue
                    bindings = {alias: fact for alias, (_p, fact) in bound.items()}
                    if any(negation_blocker(store.by_type.get(n.type, ()), n, bindings) for n in rule.negatives):
                        continue
                    if not tests_pass(rule, bindings)[0]:
                        continue
                    fired_keys.add(key)
                    per_rule[rule.id] += 1
                    if len(fired_keys) > budget:
                        worst, count = per_rule.most_common(1)[0]
                        raise InferenceError(
                            f"firing budget of {budget} exceeded: rule {worst} fired {count} times; its chain does not reach a fixpoint"
                        )
                    firings.append(_fire(store, rule, bindings, ids, suppressions))
            delta_start, delta_end = delta_end, len(store.facts)
    return Inference(store.facts, firings, suppressions)


class DefaultEngine:
    name = "default"

    def run(self, program: Program, facts: Sequence[BaseFact], *, budget: int = DEFAULT_BUDGET) -> Inference:
        return chain(program, _Store(program.indexed), facts, budget)


def _fire(
    store: _Store, rule: CompiledRule, bindings: dict[str, Fact], ids: tuple[int, ...], suppressions: list[SuppressionRecord]
) -> Firing:
    model = rule.model
    derived: list[int] = []
    for derive in model.then.derive:
        fields = {name: resolve_field(value, bindings) for name, value in sorted(derive.fields.items())}
        fact = store.add(derive.fact, fields, cited_evidence(model, derive.cite, bindings))
        if fact is not None:
            derived.append(fact.id)
    for suppress in model.then.suppress:
        suppressions.append(
            SuppressionRecord(
                rule.id,
                suppress.bucket.value if suppress.bucket else None,
                suppress.cause,
                str(resolve_field(suppress.reason, bindings)),
                cited_evidence(model, None, bindings),
            )
        )
    weight: float | None = None
    cause: str | None = None
    evidence: tuple[Evidence, ...] = ()
    if model.then.evidence is not None:
        weight = model.then.evidence.weight
        cause = model.then.evidence.cause or rule.id
        evidence = cited_evidence(model, model.then.evidence.cite, bindings)
    return Firing(rule.id, rule.stratum, ids, binding_view(bindings), tuple(derived), weight, cause, evidence)


ENGINES: dict[str, type] = {"default": DefaultEngine}


def get_engine(name: str) -> Engine:
    if name == "durable":
        from .infer_durable import DurableEngine

        return DurableEngine()
    try:
        return ENGINES[name]()  # type: ignore[no-any-return]
    except KeyError:
        raise ValueError(f"unknown engine '{name}' (choose default or durable)") from None
