"""Stage 4 on durable-rules: the same conclusions as the default engine, single-fact matching in C.

durable-rules 2.0.28 is used only for what it does correctly (see research/engine-evaluation.md):
matching one fact at a time against conjunctions of equality tests. Everything it gets wrong stays
in Python and goes through the shared helpers of `rltriage.infer`, so the two engines cannot drift apart:

* joins on `$alias.field` references, relational operators, regex, Jinja tests and negation;
* set semantics, firing order, the firing budget, evidence and suppressions.

Defects worked around, each by construction rather than by hoping:

* `Host` starts timer threads that never stop and races on session deletion, so the raw C API is
  driven directly and nothing runs inside durable's action machinery (no swallowed exceptions);
* facts are identified by a 32-bit hash: a collision surfaces as "already observed" on assert, and
  the fact is re-asserted with another salt until it is stored;
* a domain field named `id` would become the identity, so domain fields never reach durable under
  their own names — only canonical keys of the compared fields, in engine-owned slots;
* durable compares strings only, while the rule language compares loosely (`"1" == 1`,
  `true == "True"`). Facts and expected values are reduced to canonical keys that can only
  over-approximate, and every candidate durable returns is confirmed with the default store's own
  tests before it joins;
* every run creates its own uniquely named ruleset (one session) and deletes it afterwards, so
  concurrent runs never share state; the extension holds the GIL throughout each C call.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import re
import threading
import uuid
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..base.errors import InferenceError, InputError
from ..kb.compile import CompiledPattern, Program
from .default import Store, chain
from .fact import BaseFact, Fact, equality_key
from .results import DEFAULT_BUDGET, Inference
from .semantics import literal_match

# Result codes of durable's assert calls (rules.h).
_OK, _NOT_HANDLED, _OBSERVED, _DEFERRED = 0, 1, 2, 3
# durable accepts at most 4096 actions per ruleset; stay well below it and spread over rulesets.
_RULES_PER_RULESET = 2000
# `in` lists become one durable rule per value; a pattern whose lists multiply beyond this keeps
# only the type test in durable (Python confirms every candidate anyway).
_MAX_ALTERNATIVES = 64
# A hash collision is retried with a new salt; more than a few in a row means something else broke.
_MAX_SALTS = 16
# Idle ruleset sets kept per program: enough for the threads that run at once, bounded for bursts.
_MAX_IDLE = 32

_SAFE_TEXT = re.compile(r"[A-Za-z0-9_.:/@+\- ]{0,128}")


def load_durable() -> ModuleType:
    """The raw C API of durable-rules, or an InputError saying why it is unavailable."""
    try:
        import durable_rules_engine
    except Exception as exc:  # noqa: BLE001 - ImportError, or a missing symbol on Python 3.13
        raise InputError(
            f"the durable engine needs durable-rules (pip install 'rltriage[durable]'), which does not import on this Python: {exc}"
        ) from exc
    return durable_rules_engine


def canonical(value: Any) -> str:
    """A key such that `apply_operator('eq', a, b)` implies `canonical(a) == canonical(b)`.

    The rule language's equality is not transitive (True ~ 1 ~ "1" but True !~ "1"), so no key can
    be exact; this one merges every value that is equal to anything another value is equal to, and
    the caller re-checks each candidate in Python. Text outside a plain alphabet is hashed so no
    escaping rules of durable's JSON parser can matter.
    """
    if value is None:
        return "null"
    kind, payload = equality_key(value)
    return f"n:{payload!r}" if kind == "n" else _opaque(value)


def _opaque(value: Any) -> str:
    if isinstance(value, str):
        if _SAFE_TEXT.fullmatch(value):
            return f"s:{value}"
        return "h:" + hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()
    return "o:" + hashlib.sha1(repr(value).encode("utf-8", "surrogatepass")).hexdigest()


_KEYS = {"loose": canonical}


# ---------------------------------------------------------------------------------------------
# What durable is asked to match, compiled once per program


@dataclass(frozen=True)
class _Plan:
    """Durable rule definitions for a program's positive patterns.

    `rule_group` maps a durable rule to the distinct single-fact test (group) it belongs to;
    `pattern_group` maps id(pattern) to its group (None: the pattern can never match);
    `slots[type]` maps (field, key kind) to the engine-owned message field holding that key.
    """

    definitions: tuple[dict[str, Any], ...]
    rule_group: Mapping[str, int]
    pattern_group: Mapping[int, int | None]
    slots: Mapping[str, Mapping[tuple[str, str], str]]


Alternative = tuple[tuple[str, str, str], ...]  # (field, key kind, key) conjunction


def _alternatives(pattern: CompiledPattern) -> list[Alternative] | None:
    """Equality conjunctions whose union over-approximates the pattern's literal checks.

    None when the pattern can never match (an empty `in`).
    """
    choices: list[list[tuple[str, str, str]]] = []
    for check in pattern.literal_checks:
        if check.op not in ("eq", "in"):
            continue
        kind = "loose"
        values = check.value if check.op == "in" else [check.value]
        keys = sorted({_KEYS[kind](v) for v in values})
        if not keys:
            return None
        choices.append([(check.field, kind, key) for key in keys])
    # Dropping a test only widens the candidate set, so the largest lists go first when over the cap.
    choices.sort(key=len)
    while choices and _product_size(choices) > _MAX_ALTERNATIVES:
        choices.pop()
    return [tuple(sorted(combo)) for combo in itertools.product(*choices)]


def _product_size(choices: list[list[tuple[str, str, str]]]) -> int:
    size = 1
    for options in choices:
        size *= len(options)
    return size


def _build_plan(program: Program) -> _Plan:
    slots: dict[str, dict[tuple[str, str], str]] = {}
    group_of_test: dict[tuple[str, tuple[Alternative, ...]], int] = {}
    pattern_group: dict[int, int | None] = {}
    conjunctions: list[tuple[str, int, Alternative]] = []
    for rule in program.rules:
        for slot in rule.slots:
            for pattern in slot:
                alternatives = _alternatives(pattern)
                if alternatives is None:
                    pattern_group[id(pattern)] = None
                    continue
                test = (pattern.type, tuple(alternatives))
                group = group_of_test.get(test)
                if group is None:
                    group = len(group_of_test)
                    group_of_test[test] = group
                    type_slots = slots.setdefault(pattern.type, {})
                    for combo in alternatives:
                        for name, kind, _key in combo:
                            type_slots.setdefault((name, kind), f"rt_f{len(type_slots)}")
                        conjunctions.append((pattern.type, group, combo))
                pattern_group[id(pattern)] = group
    definitions: list[dict[str, Any]] = []
    rule_group: dict[str, int] = {}
    for start in range(0, len(conjunctions), _RULES_PER_RULESET):
        definition: dict[str, Any] = {}
        for number, (type_, group, combo) in enumerate(conjunctions[start : start + _RULES_PER_RULESET], start):
            # Every rule pins rt_type, so durable's own session-state fact can never match one
            # (an unpinned pattern re-fires on that fact forever).
            tests: list[dict[str, str]] = [{"rt_type": type_}]
            tests.extend({slots[type_][(name, kind)]: key} for name, kind, key in combo)
            name = f"g{group}_{number}"
            definition[name] = {"all": [{"m": tests[0] if len(tests) == 1 else {"$and": tests}}]}
            rule_group[name] = group
        definitions.append(definition)
    return _Plan(tuple(definitions), rule_group, pattern_group, slots)


class _Pool:
    """Idle rulesets of one plan, reused across runs.

    Creating a ruleset costs about 1.8 ms for the shipped rules, more than a whole diagnosis; a run
    borrows a set exclusively and deletes its session before giving it back, so at most one session
    ever lives in a ruleset (no session-id collisions, far below the 1,024-session limit).
    """

    def __init__(self, plan: _Plan) -> None:
        self.texts = tuple(json.dumps(definition) for definition in plan.definitions)
        self.idle: list[tuple[ModuleType, tuple[int, ...]]] = []
        self.lock = threading.Lock()

    def acquire(self, api: ModuleType) -> tuple[int, ...]:
        with self.lock:
            for position, (owner, handles) in enumerate(self.idle):
                if owner is api:
                    del self.idle[position]
                    return handles
        created: list[int] = []
        try:
            for text in self.texts:
                created.append(api.create_ruleset(f"rltriage_{uuid.uuid4().hex}", text))
        except BaseException:
            for handle in created:
                api.delete_ruleset(handle)
            raise
        return tuple(created)

    def release(self, api: ModuleType, handles: tuple[int, ...], reusable: bool) -> None:
        if reusable:
            with self.lock:
                if len(self.idle) < _MAX_IDLE:
                    self.idle.append((api, handles))
                    return
        for handle in handles:
            api.delete_ruleset(handle)

    def clear(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for api, handles in idle:
            for handle in handles:
                api.delete_ruleset(handle)


_plans_lock = threading.Lock()


def plan_for(program: Program) -> tuple[_Plan, _Pool]:
    """The durable plan of a program and its ruleset pool, built once and kept with the program
    (programs are immutable); the rulesets are freed when the program is."""
    with _plans_lock:
        cached = program.engine_state.get("durable")
        if cached is None:
            plan = _build_plan(program)
            pool = _Pool(plan)
            # A reloaded knowledge base gives a new program; free the old one's rulesets with it.
            weakref.finalize(program, pool.clear)
            cached = program.engine_state["durable"] = (plan, pool)
    return cached  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# The fact store: the default store, with candidates decided by durable


class _DurableStore(Store):
    """`Store` whose `candidates` come from durable's matches instead of a scan of the facts.

    Facts are asserted lazily: a candidate query for ids below `high` first asserts every fact up to
    `high` and drains durable's agenda, so durable sees derived facts exactly when the semi-naive
    loop needs them.
    """

    def __init__(self, plan: _Plan, pool: _Pool, api: ModuleType) -> None:
        # The default store's hash index would duplicate the work durable does.
        super().__init__({})
        self.plan = plan
        self.pool = pool
        self.api = api
        self.session = uuid.uuid4().hex
        self.handles: tuple[int, ...] = ()
        self.matches: dict[int, list[int]] = {}
        self.asserted = 0

    def open(self) -> None:
        self.handles = self.pool.acquire(self.api)

    def close(self, completed: bool) -> None:
        """Delete this run's session and give the rulesets back.

        After a failed run durable may still hold undrained actions of the session; such rulesets
        are deleted rather than risk a stale frame reaching the next run.
        """
        handles, self.handles = self.handles, ()
        reusable = completed
        for handle in handles:
            # Without this, delete_ruleset would also leave the session's pools allocated (about
            # 850 kB a run, measured). A ruleset no fact reached has no session (ERR_SID_NOT_FOUND).
            try:
                self.api.delete_state(handle, self.session)
            except Exception as exc:  # noqa: BLE001 - durable raises its own error type
                if "error code: 309" not in str(exc):
                    reusable = False
        self.pool.release(self.api, handles, reusable)

    def candidates(self, pattern: CompiledPattern, low: int, high: int) -> list[Fact]:
        self._sync(high)
        group = self.plan.pattern_group.get(id(pattern))
        if group is None:
            return []
        ids = self.matches.get(group, [])
        start, stop = bisect.bisect_left(ids, low), bisect.bisect_left(ids, high)
        # durable's equality over-approximates the engine's; the default store's own tests judge.
        return [fact for fact in (self.facts[i] for i in ids[start:stop]) if literal_match(pattern, fact)]

    def _sync(self, high: int) -> None:
        if self.asserted >= high:
            return
        found: dict[int, set[int]] = {}
        while self.asserted < high:
            fact = self.facts[self.asserted]
            self.asserted += 1
            type_slots = self.plan.slots.get(fact.type)
            if type_slots is None:
                continue  # no pattern tests this type, so durable could only reject it
            message: dict[str, Any] = {"sid": self.session, "rt_type": fact.type, "rt_fact": fact.id}
            for (name, kind), slot in type_slots.items():
                if name in fact.fields:
                    message[slot] = _KEYS[kind](fact.fields[name])
            for handle in self.handles:
                self._assert(handle, message, fact)
        for handle in self.handles:
            self._drain(handle, found)
        for group, ids in found.items():
            # Fact ids only grow, so appending the sorted batch keeps each list sorted.
            self.matches.setdefault(group, []).extend(sorted(ids))

    def _assert(self, handle: int, message: dict[str, Any], fact: Fact) -> None:
        for salt in range(_MAX_SALTS):
            message["rt_salt"] = salt
            code, _state = self.api.assert_fact(handle, json.dumps(message))
            if code in (_OK, _NOT_HANDLED):
                return
            if code != _OBSERVED:
                raise InferenceError(f"durable-rules refused fact {fact.id} ({fact.type}) with code {code}")
            # Every message carries a unique rt_fact, so "observed" can only be a 32-bit id collision.
        raise InferenceError(f"durable-rules kept reporting fact {fact.id} ({fact.type}) as already observed")

    def _drain(self, handle: int, found: dict[int, set[int]]) -> None:
        """Take every pending action; record which fact matched which group.

        Nothing runs inside durable's action machinery, so no exception can be swallowed there; an
        error while reading an action abandons it and propagates.
        """
        started = self.api.start_action(handle)
        while started is not None:
            _state, messages, state_offset = started
            try:
                self._record(json.loads(messages), found)
            except BaseException:
                self.api.abandon_action(handle, state_offset)
                raise
            following = self.api.complete_and_start_action(handle, state_offset)
            started = (None, following, state_offset) if following is not None else self.api.start_action(handle)

    def _record(self, payload: Any, found: dict[int, set[int]]) -> None:
        if not isinstance(payload, dict):
            raise InferenceError(f"durable-rules returned an action of unexpected shape: {payload!r:.200}")
        for rule_name, frames in payload.items():
            group = self.plan.rule_group.get(rule_name)
            if group is None:
                raise InferenceError(f"durable-rules fired an unknown rule {rule_name!r}")
            for frame in frames if isinstance(frames, list) else [frames]:
                message = frame.get("m", frame) if isinstance(frame, dict) else None
                if not isinstance(message, dict) or not isinstance(message.get("rt_fact"), int):
                    raise InferenceError(f"durable-rules returned a frame without a fact key: {frame!r:.200}")
                found.setdefault(group, set()).add(message["rt_fact"])


# ---------------------------------------------------------------------------------------------
# The engine


class DurableEngine:
    """Stratified semi-naive chaining with durable-rules deciding single-fact matches.

    The loop is the default engine's own (`rltriage.infer.default.chain`): same strata, rule order, rounds and join
    order, which is what makes the firing lists identical, not merely equal as sets.
    """

    name = "durable"

    def __init__(self) -> None:
        self.api = load_durable()

    def run(self, program: Program, facts: Iterable[BaseFact], *, budget: int = DEFAULT_BUDGET) -> Inference:
        plan, pool = plan_for(program)
        store = _DurableStore(plan, pool, self.api)
        store.open()
        completed = False
        try:
            inference = self._chain(program, store, facts, budget)
            completed = True
            return inference
        finally:
            store.close(completed)

    def _chain(self, program: Program, store: _DurableStore, facts: Iterable[BaseFact], budget: int) -> Inference:
        return chain(program, store, facts, budget)


