"""The compiled program: rules turned into patterns with checks, ordered into strata.

Compiling is part of loading a knowledge base (a cycle through negation or a test that does not
compile is a load error); the engines in `rltriage.infer` run the compiled program.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import Problem
from ..base.values import version_key
from .knowledge import KnowledgeBase, LoadedRule
from .models import Constraint, Operators, Pattern, Rule
from .regexes import BoundedPattern, PatternError, compile_bounded
from .sandbox import BoundedSandbox

# Rule tests and derived-field templates are Jinja expressions from rule packs, which are untrusted.
SANDBOX = BoundedSandbox()
SANDBOX.globals.update(version_lt=lambda a, b: version_key(a) < version_key(b), version_key=version_key)


@dataclass(frozen=True)
class Check:
    field: str
    op: str
    value: Any = None
    ref: tuple[str, str] | None = None  # (alias, field) when the value names another fact
    pattern: BoundedPattern | None = dataclasses.field(default=None, compare=False, repr=False)  # `matches`: compiled at load, or when first used (compile_program)


@dataclass(frozen=True)
class CompiledPattern:
    type: str
    alias: str
    checks: tuple[Check, ...]
    source: Pattern
    # The checks split by what they compare with: a value, or another fact's field. Worked out once:
    # the engine asks for them for every fact it tries.
    literal_checks: tuple[Check, ...] = dataclasses.field(init=False, compare=False, repr=False)
    ref_checks: tuple[Check, ...] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "literal_checks", tuple(c for c in self.checks if c.ref is None))
        object.__setattr__(self, "ref_checks", tuple(c for c in self.checks if c.ref is not None))

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
    # What an engine builds once per program (the durable engine's rulesets), kept with it.
    engine_state: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@functools.lru_cache(maxsize=4096)
def matches_pattern(pattern: str, name: str, where: str, deferred: bool = False) -> BoundedPattern:
    """A `matches:` pattern, compiled once under the same bounds as signatures (PatternError);
    with `deferred`, when first used (a pattern known to compile: see regexes.BoundedPattern)."""
    return compile_bounded(pattern, name, where=where, deferred=deferred)


def _compile_checks(field_name: str, constraint: Constraint, rule_id: str = "", where: str = "", deferred: bool = False) -> list[Check]:
    def one(op: str, value: Any) -> Check:
        if isinstance(value, str) and value.startswith("$") and "." in value:
            alias, _, attr = value[1:].partition(".")
            return Check(field_name, op, None, (alias, attr))
        if op == "matches" and value is not None:
            return Check(field_name, op, value, pattern=matches_pattern(str(value), f"rule {rule_id}: {field_name} matches {value}", where, deferred))
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


def _compile_pattern(pattern: Pattern, default_alias: str, rule_id: str, where: str, deferred: bool = False) -> CompiledPattern:
    checks: list[Check] = []
    for name, constraint in sorted(pattern.where.items()):
        checks.extend(_compile_checks(name, constraint, rule_id, where, deferred))
    return CompiledPattern(pattern.fact, pattern.alias or default_alias, tuple(checks), pattern)


def compile_pattern(pattern: Pattern, alias: str = "_", name: str = "", where: str = "") -> CompiledPattern:
    """One pattern on its own (a `collect` entry's or a catalog item's), for matching single facts;
    its `matches:` patterns are compiled under the same bounds as a rule's (PatternError)."""
    return _compile_pattern(pattern, pattern.alias or alias, name, where)


def rule_patterns(rule: Rule, where: str = "", deferred: bool = False) -> tuple[list[tuple[CompiledPattern, ...]], list[CompiledPattern]]:
    """The rule's patterns compiled; PatternError for a `matches:` pattern that may not be used
    (loading reports it where it is written: `matches_problems`). With `deferred`, `matches:`
    patterns are compiled when first used."""
    slots: list[tuple[CompiledPattern, ...]] = []
    for i, pattern in enumerate(rule.when.all):
        slots.append((_compile_pattern(pattern, f"_{i}", rule.id, where, deferred),))
    if rule.when.any:
        slots.append(tuple(_compile_pattern(p, p.alias or "any", rule.id, where, deferred) for p in rule.when.any))
    negatives = [_compile_pattern(p, f"_not{i}", rule.id, where, deferred) for i, p in enumerate(rule.when.none)]
    return slots, negatives


def matches_problems(loaded: LoadedRule) -> list[Problem]:
    """Every `matches:` pattern of a rule that may not be used, at the place it is written."""
    problems = []
    for section, index, pattern in loaded.model.when.patterns():
        for field_name, constraint in pattern.where.items():
            value = getattr(constraint, "matches", None) if isinstance(constraint, Operators) else None
            if not isinstance(value, str) or (value.startswith("$") and "." in value):
                continue
            try:
                matches_pattern(value, f"rule {loaded.id}: {field_name} matches {value}", loaded.origin.display)
            except PatternError as exc:
                line, col = loaded.origin.at("when", section, index, "where", field_name, "matches")
                problems.append(Problem(loaded.origin.display, line, col, "bad-regex", f"matches: {exc}"))
    return problems


def produced_types(rule: Rule) -> set[str]:
    return {d.fact for d in rule.then.derive}


def compile_program(kb: KnowledgeBase, problems: list[Problem], known_good: frozenset[str] = frozenset()) -> Program | None:
    """Compile and stratify the rules; stratification failures are knowledge-base problems. The
    `matches:` patterns of the rules `known_good` (from a pack whose exact bytes loaded without a
    problem before) are compiled when first used."""
    compiled_parts = []
    for index, loaded in enumerate(kb.rules):
        deferred = loaded.id in known_good
        found = [] if deferred else matches_problems(loaded)
        if found:
            problems.extend(found)
            continue
        slots, negatives = rule_patterns(loaded.model, loaded.origin.display, deferred)
        tests = []
        for t_index, text in enumerate(loaded.model.when.test):
            try:
                # No guard needed (it would double the load time): the sandbox's operators on sizes
                # cannot be folded at compile time, and guarded filters check their numbers when they are.
                tests.append((text, SANDBOX.compile_expression(text)))
            except Exception as exc:  # noqa: BLE001 - any template syntax error (or limit) is a rule problem
                line, col = loaded.origin.at("when", "test", t_index)
                problems.append(Problem(loaded.origin.display, line, col, "bad-test", f"test does not compile: {exc}"))
        compiled_parts.append((loaded, index, slots, negatives, tests))

    if problems:
        return None
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
