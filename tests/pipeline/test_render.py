"""Rendering: the formats table, fix templates with the run's values, and the template cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import rltriage
from rltriage.base.contract import Evidence, InputSummary, input_summary
from rltriage.base.vocabulary import InputKind
from rltriage.infer.fact import Cited, Fact
from rltriage.kb.knowledge import KnowledgeBase
from rltriage.kb.sandbox import _SIMPLE, is_simple
from rltriage.pipeline import render
from rltriage.pipeline.render import (
    FORMATS,
    ConfigView,
    _environment,
    environment,
    format_diagnosis,
    format_pieces,
    render_string,
    template_context,
)

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "trl" / "reward_never_returned"


def test_every_format_renders_a_diagnosis(kb: KnowledgeBase) -> None:
    diagnosis = rltriage.diagnose([RUN])
    assert list(FORMATS) == ["text", "markdown", "json", "html"]
    text = format_diagnosis(diagnosis, "text", kb)
    assert text.startswith("rltriage ") and "Root-cause ranking" in text and "\x1b[" not in text
    assert "\x1b[1m" in format_diagnosis(diagnosis, "text", kb, colour=True)
    assert format_diagnosis(diagnosis, "markdown", kb).startswith("#")
    assert json.loads(format_diagnosis(diagnosis, "json", kb))["primary_bucket"] == "reward_blocking"


def test_templates_see_the_runs_config(kb: KnowledgeBase) -> None:
    facts = [
        Fact(0, "config", {"key": "trainer.num_generations", "value": 8, "path": "log", "line": 3, "source": "log"}),
        Fact(1, "config", {"key": "trainer.num_generations", "value": 16, "path": "grpo.yaml", "line": 7, "source": "file"}),
        Fact(2, "package", {"name": "vllm", "version": "0.6.3"}),
    ]
    context = template_context({"msg": {"n": 2}}, facts)
    text = "{{ cfg_key('num_generations') }}={{ cfg('num_generations') }} at {{ cfg_at('num_generations') }}, vllm {{ package('vllm') }}, n {{ msg.n }}"
    assert render_string(kb, text, context) == "trainer.num_generations=16 at grpo.yaml:7, vllm 0.6.3, n 2"
    view = ConfigView(facts[:2])
    assert view.has("num_generations") and not view.has("generations") and view.get("missing", 5) == 5


def test_the_environment_is_kept_with_the_knowledge_base(kb: KnowledgeBase) -> None:
    assert environment(kb) is environment(kb)
    assert environment(kb).filters["size"](1024) == "1.00 KiB"


def test_report_templates_compiled_by_one_process_serve_the_next(kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLTRIAGE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RLTRIAGE_NO_CACHE", raising=False)
    diagnosis = rltriage.diagnose([RUN])

    def report_with_a_new_environment() -> tuple[str, bool]:
        env = _environment(kb)  # what a new process builds
        monkeypatch.setattr(kb.cache, "get", lambda key, build: env if key == "templates" else build())
        text = format_diagnosis(diagnosis, "text", kb)
        return text, _SIMPLE[env.get_template("report/report.txt.j2")]

    expected = report_with_a_new_environment()
    (folder,) = tmp_path.glob("templates-*")
    stored = sorted(p.suffix for p in folder.iterdir())
    assert stored.count(".jinja") >= 1 and stored.count(".simple") >= 1
    source = (kb.template_dirs[-1] / "report" / "report.txt.j2").read_text()
    assert expected[1] is is_simple(kb.cache.get("templates", lambda: None).parse(source)) is False  # the report loops: guarded
    assert report_with_a_new_environment() == expected
    for path in folder.iterdir():  # damaged entries are compiled and decided again
        path.write_bytes(b"\x00 not what was stored")
    assert report_with_a_new_environment() == expected


def test_inline_texts_compiled_by_one_process_serve_the_next(kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLTRIAGE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RLTRIAGE_NO_CACHE", raising=False)
    plain = "Set {{ key }} to {{ value | int * 2 }}."
    looping = "{% for rank in ranks %}rank {{ rank }} {% endfor %}"
    context = {"key": "vllm.gpu_memory_utilization", "value": 3, "ranks": [0, 1]}

    def rendered_by_a_new_environment(text: str) -> tuple[str, bool, int]:
        env = _environment(kb)  # what a new process builds
        compiled = 0
        compile_ = env.compile

        def counted(*args: object, **kwargs: object) -> object:
            nonlocal compiled
            compiled += 1
            return compile_(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(env, "compile", counted)
        template = env.from_string(text)
        return template.render(**context), _SIMPLE[template], compiled

    assert rendered_by_a_new_environment(plain) == ("Set vllm.gpu_memory_utilization to 6.", True, 1)
    assert rendered_by_a_new_environment(plain) == ("Set vllm.gpu_memory_utilization to 6.", True, 0)  # from the cache
    assert rendered_by_a_new_environment(looping) == ("rank 0 rank 1 ", False, 1)  # a loop: guarded
    assert rendered_by_a_new_environment(looping) == ("rank 0 rank 1 ", False, 0)
    (folder,) = tmp_path.glob("templates-*")
    for path in folder.iterdir():  # damaged entries are compiled and decided again
        path.write_bytes(b"\x00 not what was stored")
    assert rendered_by_a_new_environment(looping) == ("rank 0 rank 1 ", False, 1)
    monkeypatch.setenv("RLTRIAGE_NO_CACHE", "1")  # without a cache folder, compiled as before
    assert rendered_by_a_new_environment(plain) == ("Set vllm.gpu_memory_utilization to 6.", True, 1)


@pytest.mark.parametrize("count", [0, 1, 3, 4, 7, 9])
def test_json_written_in_slices_is_pydantics_json_byte_for_byte(kb: KnowledgeBase, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "JSON_SLICE", 3)
    diagnosis = rltriage.diagnose([RUN])
    # Names that json escapes, or that look like the key the slices are spliced in at.
    names = ['a "quoted"\n  "inputs": [],\n.log', "ünïcode ✓.log", "back\\slash.log", "tab\there.log"]
    inputs = [input_summary(f"run/{names[i % len(names)]}{i}", InputKind.driver_log, i) for i in range(count)]
    many = diagnosis.model_copy(update={"inputs": inputs})
    pieces = list(format_pieces(many, "json", kb))
    assert "".join(pieces) == many.model_dump_json(indent=2) + "\n" == format_diagnosis(many, "json", kb)
    assert len(pieces) == (1 if count <= 3 else 2 + -(-count // 3))
    assert [item["path"] for item in json.loads("".join(pieces))["inputs"]] == [i.path for i in inputs]


def test_an_input_summary_made_light_is_the_model_pydantic_makes() -> None:
    light = input_summary("run/a.log", InputKind.stack_dump, 12)
    made = InputSummary(path="run/a.log", kind=InputKind.stack_dump, lines=12)
    assert light == made and made == light and hash(light) == hash(made)
    assert light.model_dump_json() == made.model_dump_json() and repr(light) == repr(made)
    assert light.model_fields_set == made.model_fields_set and light.model_copy(update={"lines": 3}).lines == 3
    with pytest.raises(ValidationError):
        light.lines = 4  # frozen, as the model is


def test_evidence_made_from_a_citation_can_be_copied_with_changes() -> None:
    evidence = Cited("run/a.log", 3, "line", "sig.one").evidence()
    assert evidence.model_copy(update={"line": 4}).line == 4 and evidence.line == 3
    assert Cited("run/b.log", 1, "x", "sig.two").evidence().model_fields_set == set(Evidence.model_fields)
