"""Rendering: the formats table, fix templates with the run's values, and the template cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rltriage
from rltriage.infer.fact import Fact
from rltriage.kb.knowledge import KnowledgeBase
from rltriage.kb.sandbox import _SIMPLE, is_simple
from rltriage.pipeline.render import FORMATS, ConfigView, _environment, environment, format_diagnosis, render_string, template_context

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
