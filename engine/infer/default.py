"""The default engine: a stratified, semi-naive forward chainer.

* rules are ordered into strata so that a rule that negates a fact type runs only after every rule
  that can produce that type — negation is order-independent by construction;
* within a stratum only tuples that contain at least one new fact are matched (semi-naive);
* facts have set semantics (type plus fields), a rule fires once per tuple of facts;
* order is deterministic: stratum, priority, rule id, fact ids in scan order;
* a firing budget turns a runaway chain into an InferenceError naming the rule;
* a position joined to an earlier one by `eq` has its options looked up by the joined value (once
  it is visited twice), not each tried.

The engine keeps no state between runs, so one compiled program is shared by any number of threads.
`chain` is the loop every engine shares; an engine decides single-fact matches through its store.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain as chained
from typing import Any

from ..base.errors import InferenceError
from ..kb.compile import Check, CompiledPattern, CompiledRule, Program
from .fact import BaseFact, Cited, Fact, TableFields, equality_key, fact_key
from .results import DEFAULT_BUDGET, DERIVED_BUDGET, MAX_CONCLUDING_FIRINGS, Firing, Inference, SuppressionRecord
from .semantics import binding_view, cited_evidence, literal_match, refs_complete, refs_match, resolve_field, tests_pass


class Store:
    def __init__(self, indexed: Mapping[str, frozenset[str]]) -> None:
        self.facts: list[Fact] = []
        self.by_type: dict[str, list[Fact]] = defaultdict(list)
        # Facts by the hash of their key, not the key: a key is a tuple of every field a fact has,
        # most of its size, and a folder of 100,000 files asserts as many facts. A fact whose key's
        # hash another fact took is kept by its key in `colliding`.
        self.keys: dict[int, Fact] = {}
        self.colliding: dict[tuple[Any, ...], Fact] = {}
        self.indexed = indexed
        self.index: dict[tuple[str, str, Any], list[Fact]] = defaultdict(list)
        self.derived_text = 0  # characters of text in derived facts, against DERIVED_BUDGET
        # Per pattern: the facts of its pool that pass its literal checks (see `_passing`).
        self.passing: dict[int, _Passing] = {}
        # Per negated pattern: how many of those were filed, by the value its first equality join
        # wants (see `blocker`).
        self.negated: dict[int, tuple[list[int], dict[Any, list[Fact]]]] = {}

    def add(self, type_: str, fields: Mapping[str, Any], evidence: tuple[Cited, ...]) -> Fact | None:
        key = fact_key(type_, fields)
        digest = hash(key)
        existing = self.keys.get(digest)
        # Equal fields give equal keys; only a fact that differs is checked by its key.
        if existing is not None and not (existing.type == type_ and existing.fields == fields) and existing.key != key:
            existing = self.colliding.get(key)
        if existing is not None:
            # Set semantics: the fact exists already; keep the extra proof lines it was derived from.
            merged = list(existing.evidence)
            for ev in evidence:
                if len(merged) < 8 and all((e.path, e.line) != (ev.path, ev.line) for e in merged):
                    merged.append(ev)
            object.__setattr__(existing, "evidence", tuple(merged))
            return None
        # The fields are shared with the fact asserted, not copied (no one changes them once
        # asserted): a folder of 100,000 files asserts as many input facts.
        fact = Fact(len(self.facts), type_, fields if type(fields) is dict or isinstance(fields, TableFields) else dict(fields), evidence)
        self.facts.append(fact)
        self.by_type[type_].append(fact)
        if digest in self.keys:
            self.colliding[key] = fact
        else:
            self.keys[digest] = fact
        for name in self.indexed.get(type_, ()):
            if name in fact.fields:
                self.index[(type_, name, equality_key(fact.fields[name]))].append(fact)
        return fact

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
                    ids = [f.id for f in pool]
                    start, stop = bisect.bisect_left(ids, low), bisect.bisect_left(ids, high)
                    return [f for f in pool[start:stop] if literal_match(pattern, f)]
        if pool is None:
            pool = self.by_type.get(pattern.type, [])
        passing = self._passing(pattern, pool)
        start, stop = bisect.bisect_left(passing.ids, low), bisect.bisect_left(passing.ids, high)
        return passing.facts[start:stop]

    def _passing(self, pattern: CompiledPattern, pool: list[Fact]) -> _Passing:
        """The facts of the pool that pass the pattern's literal checks, brought up to date."""
        passing = self.passing.get(id(pattern))
        if passing is None or passing.pool is not pool:  # a pool only grows, but may not exist yet
            passing = self.passing[id(pattern)] = _Passing(pool)
        passing.update(pattern)
        return passing

    def blocker(self, pattern: CompiledPattern, bindings: Mapping[str, Fact]) -> Fact | None:
        """A fact that blocks the negated pattern under these bindings, as `negation_blocker` finds
        over every fact of the type, without looking at every fact for every binding: the facts that
        pass the pattern's literal checks are kept (the store only grows, so each fact is checked
        once), keyed by the field of its first `eq` join, and only those sharing the bound value are
        checked against the joins. Hundreds of stack dumps each negating the others stay linear."""
        join = next((c for c in pattern.ref_checks if c.op == "eq"), None)
        seen, by_value = self.negated.setdefault(id(pattern), ([0], {}))
        facts = self._passing(pattern, self.by_type.get(pattern.type, [])).facts
        for fact in facts[seen[0] :]:
            if join is None:
                by_value.setdefault(None, []).append(fact)
            elif join.field in fact.fields:  # without the field an `eq` join never holds
                by_value.setdefault(equality_key(fact.fields[join.field]), []).append(fact)
        seen[0] = len(facts)
        if join is None:
            pool = by_value.get(None, [])
        else:
            assert join.ref is not None
            other = bindings.get(join.ref[0])
            if other is None or join.ref[1] not in other.fields:
                return None  # the join cannot hold (refs_complete would say so for every fact)
            pool = by_value.get(equality_key(other.fields[join.ref[1]]), [])
        return next((fact for fact in pool if refs_complete(pattern, fact, bindings)), None)


class _Passing:
    """The facts of one pool (a list the store only appends to) that pass a pattern's literal
    checks, and their ids, kept as the pool grows: each fact is checked once, where the semi-naive
    loop asks for the older facts again at every round."""

    __slots__ = ("facts", "ids", "looked", "pool")

    def __init__(self, pool: list[Fact]) -> None:
        self.pool = pool
        self.looked = 0
        self.facts: list[Fact] = []
        self.ids: list[int] = []

    def update(self, pattern: CompiledPattern) -> None:
        for fact in self.pool[self.looked :]:
            if literal_match(pattern, fact):
                self.facts.append(fact)
                self.ids.append(fact.id)
        self.looked = len(self.pool)


Bound = dict[str, tuple[CompiledPattern, Fact]]


def _join(store: Store, rule: CompiledRule, delta_start: int, delta_end: int) -> Iterator[Bound]:
    """Semi-naive join: every tuple with at least one fact from [delta_start, delta_end)."""
    slots = rule.slots
    if not slots:
        if delta_start == 0:
            yield {}
        return
    joins = _equality_joins(slots)
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
            yield from _product([_Position(pool, join) for pool, join in zip(pools, joins, strict=True)], 0, {})


# A position's options are filed by join value only when there are more than this: a few are
# tried faster than filed.
_KEYED_FROM = 8


def _equality_joins(slots: tuple[tuple[CompiledPattern, ...], ...]) -> list[dict[int, Check]]:
    """Per position, the patterns (by id) with an `eq` join on a fact that an earlier position has
    surely bound (every pattern of that position binds the same alias), and that join."""
    bound: set[str] = set()
    joins: list[dict[int, Check]] = []
    for slot in slots:
        joins.append(
            {id(pattern): join for pattern in slot if (join := next((c for c in pattern.ref_checks if c.op == "eq" and c.ref and c.ref[0] in bound), None))}
        )
        if len({pattern.alias for pattern in slot}) == 1:
            bound.add(slot[0].alias)
    return joins


class _Keyed:
    """The options of one position filed by the value of their pattern's `eq` join: the product
    tries only those that share the bound fact's value (the equality key over-approximates, and
    every option picked is still checked against all its joins), in their order in the pool. A rule
    that joins a failure with a hit on the same path would otherwise try every failure with every
    hit: 256 ranks make 65,536 pairs, of which 256 share a path."""

    __slots__ = ("buckets", "free", "joins")

    def __init__(self, pool: list[tuple[CompiledPattern, Fact]], joins: dict[int, Check]) -> None:
        self.joins = list(joins.items())
        self.free: list[int] = []  # options whose pattern has no such join: always tried
        self.buckets: dict[tuple[int, Any], list[int]] = {}
        for index, (pattern, fact) in enumerate(pool):
            join = joins.get(id(pattern))
            if join is None:
                self.free.append(index)
            elif join.field in fact.fields:  # without the field an `eq` join never holds
                self.buckets.setdefault((id(pattern), equality_key(fact.fields[join.field])), []).append(index)

    def picked(self, facts: Mapping[str, Fact]) -> list[int]:
        """The positions in the pool of the options that may join the facts bound."""
        picked = [self.free]
        for key, join in self.joins:
            assert join.ref is not None
            other = facts[join.ref[0]]
            if join.ref[1] in other.fields:  # a missing field joins nothing (check_passes)
                picked.append(self.buckets.get((key, equality_key(other.fields[join.ref[1]])), []))
        return picked[0] if len(picked) == 1 else sorted(chained.from_iterable(picked))


class _Position:
    """One position of a join: its options, and what picks those that may join the facts bound.
    The options are filed by join value (`_Keyed`) when the position is visited a second time: a
    rule that stops at its first tuples (a fixed conclusion) visits most positions once, and filing
    a pool of 100,000 options would cost more than the one pass it saves."""

    __slots__ = ("index", "joins", "pool", "visits")

    def __init__(self, pool: list[tuple[CompiledPattern, Fact]], joins: dict[int, Check]) -> None:
        self.pool = pool
        self.joins = joins
        self.index: _Keyed | None = None
        self.visits = 0

    def options(self, facts: Mapping[str, Fact]) -> Iterable[tuple[CompiledPattern, Fact]]:
        if self.index is None and self.joins and len(self.pool) > _KEYED_FROM:
            self.visits += 1
            if self.visits > 1:
                self.index = _Keyed(self.pool, self.joins)
        if self.index is None:
            return self.pool
        return (self.pool[i] for i in self.index.picked(facts))


def _product(positions: list[_Position], position: int, bound: Bound) -> Iterator[Bound]:
    if position == len(positions):
        yield dict(bound)
        return
    facts = {alias: fact for alias, (_p, fact) in bound.items()}
    for pattern, fact in positions[position].options(facts):
        if pattern.alias in bound or not refs_match(pattern, fact, facts):
            continue
        bound[pattern.alias] = (pattern, fact)
        yield from _product(positions, position + 1, bound)
        del bound[pattern.alias]


def refs_hold(bound: Bound) -> bool:
    facts = {alias: fact for alias, (_p, fact) in bound.items()}
    return all(refs_complete(pattern, fact, facts) for pattern, fact in bound.values())


def chain(program: Program, store: Store, facts: Iterable[BaseFact], budget: int = DEFAULT_BUDGET) -> Inference:
    """The stratified semi-naive loop, shared by every engine; `store` decides single-fact matches."""
    for base in facts:
        store.add(base.type, base.fields, base.evidence)
    asserted = len(store.facts)
    # The budget grows with the input (a rule may fire once per fact) but stays finite, so a
    # chain that derives new facts forever is still stopped.
    budget = max(budget, 8 * len(store.facts))
    firings: list[Firing] = []
    suppressions: list[SuppressionRecord] = []
    fired_keys: set[tuple[str, tuple[int, ...]]] = set()
    per_rule: Counter[str] = Counter()
    chained = 0  # firings against the budget: all but the repeats of a fixed conclusion
    repeats: Counter[str] = Counter()  # repeats of a fixed conclusion, per rule
    # Per stratum, each rule with the fact types its positive patterns want, and its negated patterns
    # split into those that name no bound fact and the others (worked out once: a long chain goes
    # round this loop once per new fact).
    wanted = [
        [
            (
                rule,
                frozenset(p.type for slot in rule.slots for p in slot),
                tuple(n for n in rule.negatives if not n.ref_checks),
                tuple(n for n in rule.negatives if n.ref_checks),
            )
            for rule in stratum
        ]
        for stratum in program.strata
    ]
    for stratum in wanted:
        delta_start = 0
        delta_end = len(store.facts)
        while delta_start < delta_end:
            # A rule can only find a new tuple if one of its patterns wants a type that is new.
            new_types = {fact.type for fact in store.facts[delta_start:delta_end]}
            for rule, types, unbound_negatives, bound_negatives in stratum:
                if types and types.isdisjoint(new_types):
                    continue
                # A rule whose conclusion does not depend on its tuple (a weight, citations, or a
                # fact with fixed fields) can only repeat it after the first firing: it stops at
                # MAX_CONCLUDING_FIRINGS and its tuples are enumerated lazily. Others take every
                # tuple first, since they add facts while firing.
                fixed = _fixed_conclusion(rule)
                if fixed and repeats[rule.id] >= MAX_CONCLUDING_FIRINGS:
                    continue
                tuples = _join(store, rule, delta_start, delta_end) if fixed else list(_join(store, rule, delta_start, delta_end))
                # A negated pattern that names no bound fact blocks every tuple alike, and its type is
                # complete in this stratum: checked at the first tuple, not at each (a rule joining
                # every rank's hit with every other rank's has tens of thousands).
                unbound = unbound_negatives
                for bound in tuples:
                    ids = tuple(fact.id for _pattern, fact in bound.values())
                    key = (rule.id, ids)
                    if key in fired_keys or not refs_hold(bound):
                        continue
                    if unbound:
                        if any(store.blocker(n, {}) for n in unbound):
                            break  # every tuple of the rule is blocked
                        unbound = ()
                    bindings = {alias: fact for alias, (_p, fact) in bound.items()}
                    if any(store.blocker(n, bindings) for n in bound_negatives):
                        continue
                    if not tests_pass(rule, bindings)[0]:
                        continue
                    fired_keys.add(key)
                    per_rule[rule.id] += 1
                    firing = _fire(store, rule, bindings, ids, suppressions)
                    firings.append(firing)
                    if fixed and not firing.derived:
                        # A repeat of a fixed conclusion extends no chain: it does not count
                        # against the budget, and the rule stops at its cap.
                        repeats[rule.id] += 1
                        if repeats[rule.id] >= MAX_CONCLUDING_FIRINGS:
                            break
                        continue
                    chained += 1
                    if chained > budget:
                        worst, count = per_rule.most_common(1)[0]
                        raise InferenceError(
                            f"firing budget of {budget} exceeded: rule {worst} fired {count} times; its chain does not reach a fixpoint"
                        )
            delta_start, delta_end = delta_end, len(store.facts)
    return Inference(store.facts, firings, suppressions, asserted)


def _fixed_conclusion(rule: CompiledRule) -> bool:
    """Whether every firing of the rule concludes the same: it derives nothing, or only facts whose
    fields name no bound fact (no `$alias.field`, no template)."""
    return all(
        not (isinstance(value, str) and (value.startswith("$") or "{{" in value or "{%" in value))
        for derive in rule.model.then.derive
        for value in derive.fields.values()
    )


class DefaultEngine:
    name = "default"

    def run(self, program: Program, facts: Iterable[BaseFact], *, budget: int = DEFAULT_BUDGET) -> Inference:
        return chain(program, Store(program.indexed), facts, budget)


def _fire(
    store: Store, rule: CompiledRule, bindings: dict[str, Fact], ids: tuple[int, ...], suppressions: list[SuppressionRecord]
) -> Firing:
    model = rule.model
    derived: list[int] = []
    for derive in model.then.derive:
        fields = {name: resolve_field(value, bindings) for name, value in sorted(derive.fields.items())}
        # Copied fields are as large as the facts they come from; only computed ones can grow.
        store.derived_text += sum(len(v) for name, v in fields.items() if isinstance(v, str) and "{{" in str(derive.fields[name]))
        if store.derived_text > DERIVED_BUDGET:
            raise InferenceError(
                f"derived facts hold more than {DERIVED_BUDGET >> 20} MiB of computed text: rule {rule.id} derives ever larger values; its chain does not reach a fixpoint"
            )
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
    evidence: tuple[Cited, ...] = ()
    if model.then.evidence is not None:
        weight = model.then.evidence.weight
        cause = model.then.evidence.cause or rule.id
        evidence = cited_evidence(model, model.then.evidence.cite, bindings)
    return Firing(rule.id, rule.stratum, ids, binding_view(bindings), tuple(derived), weight, cause, evidence)
