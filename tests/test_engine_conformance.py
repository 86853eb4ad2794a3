"""Conformance: what every inference engine must conclude, whatever it is built on.

Each test writes a small rule pack to a temporary folder, loads it without the shipped knowledge
base and runs one engine on hand-made facts. Rule files are written as JSON, which is YAML, so the
tests need no YAML writer and positions in error messages still point into the files.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import rltriage
from rltriage import KnowledgeBase
from rltriage.base.errors import InferenceError, InputError, KnowledgeBaseError
from rltriage.infer.fact import BaseFact, Cited, Fact
from rltriage.infer.registry import get_engine
from rltriage.infer.results import MAX_CONCLUDING_FIRINGS, Engine, Inference


def durable_unavailable() -> str | None:
    try:
        get_engine("durable")
    except InputError as exc:
        return str(exc)
    return None


DURABLE_MISSING = durable_unavailable()
ENGINES = [
    "default",
    pytest.param("durable", marks=pytest.mark.skipif(DURABLE_MISSING is not None, reason=DURABLE_MISSING or "")),
]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


# ---------------------------------------------------------------------------------------------
# Building packs and facts


def _role(then: dict[str, Any]) -> str:
    evidence = then.get("evidence")
    if evidence is not None:
        return "support" if evidence.get("cause") else "evidence"
    return "derive" if then.get("derive") else "guard"


def rule(rule_id: str, when: dict[str, Any], then: dict[str, Any], **extra: Any) -> dict[str, Any]:
    base = {"id": rule_id, "title": f"test rule {rule_id}", "role": _role(then), "source": "engine conformance test"}
    return {**base, **extra, "when": when, "then": then}


def cause(rule_id: str, when: dict[str, Any], weight: float, **then: Any) -> dict[str, Any]:
    """A rule that concludes a cause of its own (needs a bucket and a fix)."""
    return rule(rule_id, when, {"evidence": {"weight": weight, **then}}, bucket="reward_blocking", fix="stub the reward")


def signature(sig_id: str, pattern: str) -> dict[str, Any]:
    return {
        "id": sig_id,
        "title": f"test signature {sig_id}",
        "source": "engine conformance test",
        "pattern": pattern,
        "examples": {"match": ["never checked at load"], "no_match": ["never checked at load"]},
    }


def write_pack(root: Path, rules: list[dict[str, Any]], signatures: list[dict[str, Any]] = ()) -> Path:  # type: ignore[assignment]
    pack = root / "pack"
    for folder, items in (("rules", rules), ("signatures", signatures)):
        for item in items:
            path = pack / folder / Path(*item["id"].split(".")).with_suffix(".yaml")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(item, indent=2) + "\n", encoding="utf-8")
    (pack / "templates").mkdir(parents=True, exist_ok=True)
    return pack


def load(root: Path, rules: list[dict[str, Any]], signatures: list[dict[str, Any]] = ()) -> KnowledgeBase:  # type: ignore[assignment]
    return rltriage.load_knowledge_base([write_pack(root, rules, signatures)], include_builtin=False)


def ev(line: int, path: str = "train.log", signature_id: str = "t.sig") -> Cited:
    return Cited(path=path, line=line, text=f"line {line}", signature=signature_id)


def fact(type_: str, *lines: int, **fields: Any) -> BaseFact:
    return BaseFact(type_, fields, tuple(ev(n) for n in lines))


RUN = fact("run", mode="diagnose", inputs=1, log_lines=10)


def run(engine: Engine, kb: KnowledgeBase, facts: list[BaseFact], budget: int | None = None) -> Inference:
    if budget is None:
        return engine.run(kb.program, facts)
    return engine.run(kb.program, facts, budget=budget)


def derived(inference: Inference, type_: str) -> list[dict[str, Any]]:
    return [dict(f.fields) for f in inference.facts_of(type_)]


def fired(inference: Inference) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.rule, f.facts) for f in inference.firings]


def fact_by_id(inference: Inference, fact_id: int) -> Fact:
    return inference.facts[fact_id]


# ---------------------------------------------------------------------------------------------
# Set semantics, chains, joins


def test_a_fact_derived_twice_exists_once(engine: Engine, tmp_path: Path) -> None:
    kb = load(
        tmp_path,
        [
            rule(
                "t.first",
                {"all": [{"fact": "config", "as": "c", "where": {"name": "lr"}}]},
                {"derive": [{"fact": "flag", "fields": {"name": "x"}}]},
            ),
            rule("t.second", {"all": [{"fact": "run"}]}, {"derive": [{"fact": "flag", "fields": {"name": "x"}}]}),
        ],
    )
    facts = [RUN, fact("config", 3, key="a.lr", name="lr", value=1), fact("config", 4, key="b.lr", name="lr", value=2)]
    inference = run(engine, kb, facts)
    assert derived(inference, "flag") == [{"name": "x"}]
    # Three firings, one new fact: the later firings derive nothing new but keep their proof lines.
    assert sorted(f.rule for f in inference.firings) == ["t.first", "t.first", "t.second"]
    assert sum(len(f.derived) for f in inference.firings) == 1
    flag = inference.facts_of("flag")[0]
    assert {(e.path, e.line) for e in flag.evidence} == {("train.log", 3), ("train.log", 4)}


def test_a_chain_of_three_rules(engine: Engine, tmp_path: Path) -> None:
    kb = load(
        tmp_path,
        [
            rule("t.c1", {"all": [{"fact": "run", "where": {"mode": "diagnose"}}]}, {"derive": [{"fact": "step_one", "fields": {"v": 1}}]}),
            rule("t.c2", {"all": [{"fact": "step_one", "as": "s"}]}, {"derive": [{"fact": "step_two", "fields": {"v": "{{ s.v + 1 }}"}}]}),
            rule(
                "t.c3",
                {"all": [{"fact": "step_two", "as": "s"}]},
                {"derive": [{"fact": "step_three", "fields": {"v": "$s.v", "label": "done"}}]},
            ),
        ],
    )
    inference = run(engine, kb, [RUN])
    assert derived(inference, "step_three") == [{"label": "done", "v": 2}]
    assert [f.rule for f in inference.firings] == ["t.c1", "t.c2", "t.c3"]


def test_joins_with_alias_references(engine: Engine, tmp_path: Path) -> None:
    sigs = [signature("t.alpha", r"ALPHA (?P<param>\w+) (?P<limit>\d+)")]
    kb = load(
        tmp_path,
        [
            rule(
                "t.join",
                {
                    "all": [
                        {"hit": "t.alpha", "as": "a"},
                        {"fact": "config", "as": "c", "where": {"name": "$a.param", "value": {"gt": "$a.limit"}}},
                    ]
                },
                {"derive": [{"fact": "over", "fields": {"key": "$c.key", "limit": "$a.limit"}, "cite": ["c"]}]},
            )
        ],
        sigs,
    )
    facts = [
        fact("hit", 10, signature="t.alpha", param="batch", limit=8, line=10),
        fact("hit", 11, signature="t.alpha", param="lr", limit=1, line=11),
        fact("config", 20, key="trainer.batch", name="batch", value=16),
        fact("config", 21, key="other.batch", name="batch", value=4),
        fact("config", 22, key="trainer.lr", name="lr", value="2"),
        fact("config", 23, key="trainer.epochs", name="epochs", value=99),
    ]
    inference = run(engine, kb, facts)
    assert sorted((d["key"], d["limit"]) for d in derived(inference, "over")) == [("trainer.batch", 8), ("trainer.lr", 1)]
    over = sorted(inference.facts_of("over"), key=lambda f: f.fields["key"])
    assert [e.line for e in over[0].evidence] == [20]  # cite: [c] keeps only the config line


# ---------------------------------------------------------------------------------------------
# Operators and `any`


OPERATOR_RULES = {
    "gt": {"name": "steps", "value": {"gt": 5}},
    "in": {"name": {"in": ["alpha", "beta"]}},
    "version_lt": None,  # on package facts, below
    "multiple_of": {"name": "bs", "value": {"multiple_of": 4}},
    "not_multiple_of": {"name": "bs", "value": {"not_multiple_of": 4}},
    "exists": {"extra": {"exists": True}},
    "matches": {"key": {"matches": r"^trainer\.(lr|wd)$"}},
    "loose_eq": {"name": "flag", "value": True},
    "number_eq": {"name": "count", "value": 3},
}


def _operator_kb(tmp_path: Path) -> KnowledgeBase:
    rules = []
    for op, where in OPERATOR_RULES.items():
        pattern: dict[str, Any] = (
            {"fact": "package", "as": "x", "where": {"name": "torch", "version": {"version_lt": "2.4"}}}
            if where is None
            else {"fact": "config", "as": "x", "where": where}
        )
        rules.append(rule(f"t.op_{op}", {"all": [pattern]}, {"derive": [{"fact": "ok", "fields": {"op": op, "line": "$x.line"}}]}))
    return load(tmp_path, rules)


def _config(line: int, key: str, value: Any, **more: Any) -> BaseFact:
    return fact("config", line, key=key, name=key.rsplit(".", 1)[-1], value=value, line=line, **more)


def test_operators(engine: Engine, tmp_path: Path) -> None:
    kb = _operator_kb(tmp_path)
    facts = [
        _config(1, "a.steps", 6),
        _config(2, "b.steps", "5"),  # gt is strict
        _config(3, "c.steps", "12"),  # numbers written as text compare as numbers
        _config(4, "alpha", 0),
        _config(5, "gamma", 0),
        _config(6, "x.bs", 8),
        _config(7, "y.bs", 6),
        _config(8, "z.bs", "n/a"),  # neither a multiple nor a non-multiple
        _config(9, "e.thing", 1, extra=None),  # exists means present, even when null
        _config(10, "trainer.lr", 1),
        _config(11, "trainer.lr_scale", 1),
        _config(12, "xtrainer.wd", 1),
        _config(13, "m.flag", "True"),  # booleans equal their spelling
        _config(14, "n.flag", "1"),  # but not "1"
        _config(15, "o.count", "3.0"),
        _config(16, "p.count", 3),
        fact("package", 17, name="torch", version="2.3.1+cu121", line=17),
        fact("package", 18, name="torch", version="2.4.0", line=18),
        fact("package", 19, name="torch", version="2.10.0", line=19),
    ]
    inference = run(engine, kb, facts)
    got: dict[str, list[int]] = {}
    for item in derived(inference, "ok"):
        got.setdefault(item["op"], []).append(item["line"])
    assert {op: sorted(lines) for op, lines in got.items()} == {
        "gt": [1, 3],
        "in": [4],
        "version_lt": [17],
        "multiple_of": [6],
        "not_multiple_of": [7],
        "exists": [9],
        "matches": [10],
        "loose_eq": [13],
        "number_eq": [15, 16],
    }


def test_any_matches_each_alternative(engine: Engine, tmp_path: Path) -> None:
    kb = load(
        tmp_path,
        [
            rule(
                "t.any",
                {
                    "all": [{"fact": "run"}],
                    "any": [
                        {"fact": "config", "as": "x", "where": {"name": "lr"}},
                        {"fact": "package", "as": "x", "where": {"name": "vllm"}},
                    ],
                },
                {"derive": [{"fact": "seen", "fields": {"name": "$x.name"}}]},
            )
        ],
    )
    inference = run(
        engine,
        kb,
        [RUN, _config(1, "t.lr", 1), fact("package", 2, name="vllm", version="0.6"), fact("package", 3, name="torch", version="2")],
    )
    assert sorted(d["name"] for d in derived(inference, "seen")) == ["lr", "vllm"]
    assert run(engine, kb, [RUN, fact("package", 3, name="torch", version="2")]).firings == []


# ---------------------------------------------------------------------------------------------
# Negation


def test_negation_is_order_independent(engine: Engine, tmp_path: Path) -> None:
    # `t.a_guard` sorts before the rules that derive what it negates, and `late` is two steps away:
    # only stratification (not rule order) keeps the guard from firing.
    kb = load(
        tmp_path,
        [
            rule(
                "t.a_guard",
                {"all": [{"fact": "run", "as": "r"}], "none": [{"fact": "late", "where": {"mode": "$r.mode"}}]},
                {"derive": [{"fact": "guarded", "fields": {"ok": True}}]},
            ),
            rule("t.m_middle", {"all": [{"fact": "run", "as": "r"}]}, {"derive": [{"fact": "middle", "fields": {"mode": "$r.mode"}}]}),
            rule("t.z_late", {"all": [{"fact": "middle", "as": "m"}]}, {"derive": [{"fact": "late", "fields": {"mode": "$m.mode"}}]}),
        ],
    )
    inference = run(engine, kb, [RUN])
    assert derived(inference, "late") == [{"mode": "diagnose"}]
    assert not inference.fired("t.a_guard")
    # When the producer of the negated fact cannot fire (no run in preflight mode), the guard fires.
    kb2 = load(
        tmp_path / "two",
        [
            rule(
                "t.a_guard",
                {"all": [{"fact": "run"}], "none": [{"fact": "late"}]},
                {"derive": [{"fact": "guarded", "fields": {"ok": True}}]},
            ),
            rule("t.z_late", {"all": [{"fact": "run", "where": {"mode": "preflight"}}]}, {"derive": [{"fact": "late", "fields": {}}]}),
        ],
    )
    inference = run(engine, kb2, [RUN])
    assert inference.fired("t.a_guard") and derived(inference, "guarded") == [{"ok": True}]


def test_cyclic_negation_is_rejected_at_load(tmp_path: Path) -> None:
    rules = [
        rule("t.ping", {"all": [{"fact": "run"}], "none": [{"fact": "pong"}]}, {"derive": [{"fact": "ping", "fields": {}}]}),
        rule("t.pong", {"all": [{"fact": "run"}], "none": [{"fact": "ping"}]}, {"derive": [{"fact": "pong", "fields": {}}]}),
    ]
    with pytest.raises(KnowledgeBaseError) as caught:
        load(tmp_path, rules)
    text = str(caught.value)
    assert re.search(r"rules/t/p[io]ng\.yaml:\d+:\d+: error\[cyclic-negation\]", text), text
    assert all(p.line > 1 for p in caught.value.problems if p.code == "cyclic-negation")


# ---------------------------------------------------------------------------------------------
# Budget, suppressions, evidence


def test_a_runaway_chain_is_stopped_by_the_budget(engine: Engine, tmp_path: Path) -> None:
    kb = load(
        tmp_path,
        [
            rule("t.count", {"all": [{"fact": "counter", "as": "x"}]}, {"derive": [{"fact": "counter", "fields": {"n": "{{ x.n + 1 }}"}}]}),
            rule("t.start", {"all": [{"fact": "run"}]}, {"derive": [{"fact": "counter", "fields": {"n": 0}}]}),
        ],
    )
    with pytest.raises(InferenceError, match=r"firing budget of 200 exceeded: rule t\.count fired \d+ times"):
        run(engine, kb, [RUN], budget=200)


def test_a_rule_joining_two_large_sets_of_facts_stops_repeating_its_conclusion(engine: Engine, tmp_path: Path) -> None:
    # Every rank's timeout with every rank's "Init COMPLETE": 300 x 300 tuples, one conclusion. The
    # rules with a fixed conclusion stop after MAX_CONCLUDING_FIRINGS; the one whose derived field
    # names its tuple fires for every tuple; none of this is a runaway chain (budget 1000 < 90,000).
    kb = load(
        tmp_path,
        [
            cause("t.timeout", {"all": [{"hit": "t.to", "as": "t"}]}, 0.6, cite=["t"]),
            rule(
                "t.joined",
                {"all": [{"hit": "t.to", "as": "t"}, {"hit": "t.ok", "as": "j"}]},
                {"evidence": {"weight": -0.3, "cause": "t.timeout", "cite": ["j"]}},
            ),
            rule("t.stage", {"all": [{"hit": "t.to"}, {"hit": "t.ok"}]}, {"derive": [{"fact": "stage_seen", "fields": {"name": "joined"}}]}),
            rule(
                "t.pair",
                {"all": [{"hit": "t.to", "as": "t"}, {"hit": "t.ok", "as": "j", "where": {"rank": 0}}]},
                {"derive": [{"fact": "pair", "fields": {"rank": "$t.rank"}}]},
            ),
        ],
        [signature("t.to", "timeout"), signature("t.ok", "joined")],
    )
    facts = [RUN]
    facts += [fact("hit", 10 + rank, signature="t.to", rank=rank, count=1) for rank in range(300)]
    facts += [fact("hit", 5000 + rank, signature="t.ok", rank=rank, count=1) for rank in range(300)]
    inference = run(engine, kb, facts, budget=1000)
    counts: dict[str, int] = {}
    for firing in inference.firings:
        counts[firing.rule] = counts.get(firing.rule, 0) + 1
    # t.stage's first firing adds its fact; the repeats after it are what is capped.
    assert counts == {"t.timeout": MAX_CONCLUDING_FIRINGS, "t.joined": MAX_CONCLUDING_FIRINGS, "t.stage": MAX_CONCLUDING_FIRINGS + 1, "t.pair": 300}
    assert len(derived(inference, "stage_seen")) == 1 and len(derived(inference, "pair")) == 300
    joined = [f for f in inference.firings if f.rule == "t.joined"]
    assert all(f.weight == -0.3 and f.cause == "t.timeout" for f in joined)


def test_suppressions(engine: Engine, tmp_path: Path) -> None:
    kb = load(
        tmp_path,
        [
            cause("t.reward", {"all": [{"fact": "run"}]}, 0.5),
            rule(
                "t.guard",
                {"all": [{"fact": "run", "as": "r"}], "none": [{"fact": "config", "where": {"name": "max_steps"}}]},
                {
                    "suppress": [
                        {"bucket": "training_signal", "reason": "no step in {{ r.mode }}"},
                        {"cause": "t.reward", "reason": "plain reason"},
                    ]
                },
            ),
        ],
    )
    inference = run(engine, kb, [RUN])
    assert [(s.rule, s.bucket, s.cause, s.reason) for s in inference.suppressions] == [
        ("t.guard", "training_signal", None, "no step in diagnose"),
        ("t.guard", None, "t.reward", "plain reason"),
    ]
    assert run(engine, kb, [RUN, _config(3, "trainer.max_steps", 1)]).suppressions == []


def test_evidence_weights_and_citations(engine: Engine, tmp_path: Path) -> None:
    sigs = [signature("t.sig", r"SIG (?P<v>\d+)")]
    kb = load(
        tmp_path,
        [
            cause("t.main", {"all": [{"hit": "t.sig", "as": "h"}, {"fact": "run", "as": "r"}]}, 0.7, cite=["h"]),
            rule(
                "t.against",
                {"all": [{"fact": "config", "as": "c", "where": {"name": "timeout"}}]},
                {"evidence": {"weight": -0.4, "cause": "t.main"}},
            ),
        ],
        sigs,
    )
    hit = fact("hit", 5, 6, signature="t.sig", v=1, line=5)
    inference = run(engine, kb, [RUN, hit, _config(7, "x.timeout", 30)])
    by_rule = {f.rule: f for f in inference.firings}
    assert (by_rule["t.main"].weight, by_rule["t.main"].cause) == (0.7, "t.main")
    assert [e.line for e in by_rule["t.main"].evidence] == [5, 6]
    assert (by_rule["t.against"].weight, by_rule["t.against"].cause) == (-0.4, "t.main")
    assert [e.line for e in by_rule["t.against"].evidence] == [7]
    assert by_rule["t.main"].bindings == {"h": dict(hit.fields), "r": dict(RUN.fields)}


# ---------------------------------------------------------------------------------------------
# Determinism and threads


def _busy_kb(tmp_path: Path) -> KnowledgeBase:
    return load(
        tmp_path,
        [
            rule(
                "t.pair",
                {
                    "all": [
                        {"fact": "config", "as": "a"},
                        {"fact": "config", "as": "b", "where": {"name": "$a.name", "line": {"gt": "$a.line"}}},
                    ]
                },
                {"derive": [{"fact": "twin", "fields": {"name": "$a.name"}}]},
            ),
            rule(
                "t.big",
                {
                    "all": [{"fact": "config", "as": "c", "where": {"value": {"ge": 50}}}],
                    "none": [{"fact": "twin", "where": {"name": "$c.name"}}],
                },
                {"derive": [{"fact": "big", "fields": {"name": "$c.name", "value": "$c.value"}}]},
            ),
            rule(
                "t.count",
                {"all": [{"fact": "big", "as": "b"}], "test": ["b.value % 2 == 0"]},
                {"evidence": {"weight": 0.3, "cause": "t.top"}},
            ),
            cause("t.top", {"all": [{"fact": "twin"}]}, 0.2),
        ],
    )


def _busy_facts(seed: int) -> list[BaseFact]:
    facts = [RUN]
    for i in range(40):
        name = f"k{(i * 7 + seed) % 13}"
        facts.append(_config(i + 1, f"s{i}.{name}", (i * 31 + seed * 17) % 100))
    return facts


def _summary(inference: Inference) -> list[tuple[Any, ...]]:
    return [
        (f.rule, f.stratum, f.facts, f.derived, f.weight, f.cause, tuple((e.path, e.line) for e in f.evidence)) for f in inference.firings
    ]


def test_same_facts_give_identical_firings(engine: Engine, tmp_path: Path) -> None:
    kb = _busy_kb(tmp_path)
    first, second = run(engine, kb, _busy_facts(3)), run(engine, kb, _busy_facts(3))
    assert first.firings and _summary(first) == _summary(second)
    assert [(f.type, dict(f.fields)) for f in first.facts] == [(f.type, dict(f.fields)) for f in second.facts]


def test_threads_give_the_serial_results(engine: Engine, tmp_path: Path) -> None:
    kb = _busy_kb(tmp_path)
    seeds = list(range(8))
    serial = {seed: _summary(run(engine, kb, _busy_facts(seed))) for seed in seeds}
    results: dict[int, list[tuple[Any, ...]]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(seeds))

    def work(seed: int) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                results[seed] = _summary(run(engine, kb, _busy_facts(seed)))
                assert results[seed] == serial[seed]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert results == serial


def test_unavailable_durable_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def failing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "durable_rules_engine":
            raise ImportError("undefined symbol: PyEval_CallObject")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", failing)
    with pytest.raises(
        InputError,
        match=r"the durable engine needs durable-rules \(pip install 'rltriage\[durable\]'\), which does not import on this Python: .*PyEval_CallObject",
    ):
        get_engine("durable")
