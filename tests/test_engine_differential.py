"""Differential: the durable engine concludes exactly what the default engine concludes on every fixture.

Fixtures are discovered when the tests are collected, so folders added later are covered without
editing this file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import rltriage
from rltriage.base.errors import InputError
from rltriage.infer.fact import BaseFact
from rltriage.infer.registry import get_engine
from rltriage.infer.results import Inference
from rltriage.kb.fixtures import fixture_dirs, read_expectation, run_inputs
from rltriage.pipeline.run import Analysis, analyse


def _durable_missing() -> str | None:
    try:
        get_engine("durable")
    except InputError as exc:
        return str(exc)
    return None


DURABLE_MISSING = _durable_missing()
pytestmark = pytest.mark.skipif(DURABLE_MISSING is not None, reason=DURABLE_MISSING or "")

KB = rltriage.load_knowledge_base()
FOLDERS = fixture_dirs(KB)


def _analyse(folder: Path, engine: str) -> Analysis:
    try:
        expect = read_expectation(folder)
    except ValueError as exc:
        pytest.skip(f"expect.yaml does not load (test_fixtures reports it): {exc}")
    return analyse(run_inputs(folder), kb=KB, engine=engine, mode=expect.mode)


def _comparable(value: Any) -> Any:
    """Field values as compared across engines: mappings in key order, and NaN (a logged metric can
    be one) equal to itself: every NaN becomes the one `math.nan` object, which containers compare
    by identity first, and which no string or number equals."""
    if isinstance(value, Mapping):
        return tuple(sorted(((str(k), _comparable(v)) for k, v in value.items()), key=lambda item: item[0]))
    if isinstance(value, (list, tuple)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return math.nan
    return value


def _facts(inference: Inference) -> list[tuple[int, str, Any, tuple[tuple[str, int], ...]]]:
    return [(f.id, f.type, _comparable(f.fields), tuple((e.path, e.line) for e in f.evidence)) for f in inference.facts]


def _firings(inference: Inference) -> list[tuple[Any, ...]]:
    return [
        (f.rule, f.stratum, f.facts, f.derived, f.weight, f.cause, tuple((e.path, e.line) for e in f.evidence), _comparable(f.bindings))
        for f in inference.firings
    ]


def test_there_are_fixtures() -> None:
    assert FOLDERS, "no fixture folder with an expect.yaml was found"


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_durable_concludes_what_default_concludes(folder: Path) -> None:
    default, durable = _analyse(folder, "default"), _analyse(folder, "durable")
    assert durable.diagnosis.model_dump_json() == default.diagnosis.model_dump_json()
    fired_default = {(f.rule, f.facts) for f in default.inference.firings}
    fired_durable = {(f.rule, f.facts) for f in durable.inference.firings}
    assert fired_durable == fired_default, {"only default": fired_default - fired_durable, "only durable": fired_durable - fired_default}
    # Stronger than the sets: same order, same derived facts with the same ids and proof lines.
    assert _firings(durable.inference) == _firings(default.inference)
    assert _facts(durable.inference) == _facts(default.inference)
    assert [(s.rule, s.bucket, s.cause, s.reason, s.evidence) for s in durable.inference.suppressions] == [
        (s.rule, s.bucket, s.cause, s.reason, s.evidence) for s in default.inference.suppressions
    ]


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_durable_is_deterministic_across_runs(folder: Path) -> None:
    first, second = _analyse(folder, "durable"), _analyse(folder, "durable")
    assert _firings(first.inference) == _firings(second.inference)


# ---------------------------------------------------------------------------------------------
# Tricky values: the rule language's loose equality against durable's strict one

# Values the rule language treats as equal across types ("1" == 1, True == "true", 1 == 1.0,
# "1,000" == 1000) and text durable's JSON parser might mangle (quotes, backslashes, non-ASCII,
# long strings); the default engine is the reference for every one of them.
RULE_VALUES: list[Any] = [
    0,
    1,
    1.0,
    -0.0,
    True,
    False,
    None,
    "1",
    "1.0",
    "true",
    "TRUE",
    "false",
    "a",
    "a b",
    "é",
    'q"uote',
    "back\\slash",
    "1,000",
    1000,
    "x" * 300,
    2**60,
]
FACT_VALUES: list[Any] = [*RULE_VALUES, "True", "0", "0.0", "1_000", "nan", "inf", " 1 ", "", 2**60 + 1, (1, 2), ["a"], 3.5]


def test_engines_agree_on_loose_equality(tmp_path: Path) -> None:
    from .test_engine_conformance import load, rule

    rules = []
    for index, value in enumerate(RULE_VALUES):
        rules.append(
            rule(
                f"t.eq_{index}",
                {"all": [{"fact": "config", "as": "c", "where": {"value": value}}]},
                {"derive": [{"fact": "eq", "fields": {"rule": index, "line": "$c.line"}}]},
            )
        )
        group = RULE_VALUES[index : index + 3]
        rules.append(
            rule(
                f"t.in_{index}",
                {"all": [{"fact": "config", "as": "c", "where": {"name": "v", "value": group}}]},
                {"derive": [{"fact": "in", "fields": {"rule": index, "line": "$c.line"}}]},
            )
        )
        rules.append(
            rule(
                f"t.ne_{index}",
                {"all": [{"fact": "config", "as": "c", "where": {"value": {"ne": value}, "name": "w"}}]},
                {"derive": [{"fact": "ne", "fields": {"rule": index, "line": "$c.line"}}]},
            )
        )
    kb = load(tmp_path, rules)
    facts = [BaseFact("run", {"mode": "diagnose"})]
    for line, value in enumerate(FACT_VALUES, start=1):
        facts.append(BaseFact("config", {"key": f"a.v{line}", "name": "v", "value": value, "line": line}))
        facts.append(BaseFact("config", {"key": f"b.w{line}", "name": "w", "value": value, "line": line}))
    facts.append(BaseFact("config", {"key": "c.missing", "name": "v", "line": 999}))
    default = get_engine("default").run(kb.program, facts)
    durable = get_engine("durable").run(kb.program, facts)
    assert default.firings, "the reference engine matched nothing; the test proves nothing"
    assert _firings(durable) == _firings(default)
    assert _facts(durable) == _facts(default)


# ---------------------------------------------------------------------------------------------
# durable-rules defects the engine must survive


class _CollidingApi:
    """The real C API, except that every fact's first assert reports a 32-bit id collision.

    It also records which sessions received facts and which were deleted, and which rulesets were
    created and deleted, to check what a run leaves behind.
    """

    def __init__(self, real: Any) -> None:
        self.real = real
        self.seen: set[tuple[int, Any]] = set()
        self.sessions: set[str] = set()
        self.deleted_sessions: set[str] = set()
        self.created: set[int] = set()
        self.deleted: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def create_ruleset(self, name: str, definition: str) -> int:
        handle: int = self.real.create_ruleset(name, definition)
        self.created.add(handle)
        return handle

    def delete_ruleset(self, handle: int) -> None:
        self.deleted.add(handle)
        self.real.delete_ruleset(handle)

    def delete_state(self, handle: int, session: str) -> None:
        self.deleted_sessions.add(session)
        self.real.delete_state(handle, session)

    def assert_fact(self, handle: int, message: str) -> tuple[int, int]:
        import json

        decoded = json.loads(message)
        self.sessions.add(decoded["sid"])
        key = (handle, decoded["rt_fact"])
        if key not in self.seen:
            self.seen.add(key)
            return (2, 1)  # ERR_EVENT_OBSERVED: what durable answers when two ids hash alike
        result: tuple[int, int] = self.real.assert_fact(handle, message)
        return result


def test_collisions_are_retried_and_runs_clean_up(tmp_path: Path) -> None:
    from rltriage.base.errors import InferenceError

    from .test_engine_conformance import _busy_facts, _busy_kb, load, rule

    kb = _busy_kb(tmp_path)
    engine = get_engine("durable")
    api = _CollidingApi(engine.api)  # type: ignore[attr-defined]
    engine.api = api  # type: ignore[attr-defined]
    for seed in (5, 6):
        reference = get_engine("default").run(kb.program, _busy_facts(seed))
        assert _firings(engine.run(kb.program, _busy_facts(seed))) == _firings(reference)
    assert len(api.sessions) == 2 and api.sessions == api.deleted_sessions
    assert len(api.created) == 1, "the second run must reuse the first run's ruleset"

    runaway = load(
        tmp_path / "runaway",
        [rule("t.count", {"all": [{"fact": "counter", "as": "x"}]}, {"derive": [{"fact": "counter", "fields": {"n": "{{ x.n + 1 }}"}}]})],
    )
    with pytest.raises(InferenceError, match="t.count"):
        engine.run(runaway.program, [BaseFact("counter", {"n": 0})], budget=50)
    assert api.sessions == api.deleted_sessions, "a failed run must still delete its session"
    assert len(api.deleted) == 1, "the ruleset of a failed run is deleted, not reused"


def _outcome(engine: str, kb: Any, facts: list[BaseFact], budget: int) -> tuple[str, Any]:
    from rltriage.base.errors import InferenceError

    try:
        return "ok", _firings(get_engine(engine).run(kb.program, facts, budget=budget))
    except InferenceError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("budget", [1, 5, 40, 1000])
def test_engines_agree_on_the_budget(tmp_path: Path, budget: int) -> None:
    # The engine loops are written twice; a change to how the budget is counted or scaled in one
    # of them shows here first.
    from .test_engine_conformance import _busy_facts, _busy_kb

    kb = _busy_kb(tmp_path)
    facts = _busy_facts(2)[:6]
    assert _outcome("durable", kb, facts, budget) == _outcome("default", kb, facts, budget)


def test_engines_stop_a_runaway_chain_alike(tmp_path: Path) -> None:
    from .test_engine_conformance import load, rule

    kb = load(
        tmp_path,
        [rule("t.count", {"all": [{"fact": "counter", "as": "x"}]}, {"derive": [{"fact": "counter", "fields": {"n": "{{ x.n + 1 }}"}}]})],
    )
    facts = [BaseFact("counter", {"n": 100 * i}) for i in range(4)]
    default = _outcome("default", kb, facts, 10)
    assert default[0] == "error" and "t.count" in default[1]
    assert _outcome("durable", kb, facts, 10) == default
