"""`rltriage diff GOOD BAD` on healthy/broken fixture pairs: it names the change and the matching cause first."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import rltriage
from rltriage.cli import main
from rltriage.kb.yamlio import load_yaml
from rltriage.tools.diff import diff_runs, render_diff

from ..conftest import FIXTURES, REPO

CASES = sorted(p.parent for p in (FIXTURES / "diff").glob("*/diff.yaml"))


def _expect(case: Path) -> dict[str, str]:
    tree, problems = load_yaml(case / "diff.yaml", str(case / "diff.yaml"))
    assert not problems
    return dict(tree)


def test_there_are_the_four_kinds_of_change() -> None:
    assert {c.name for c in CASES} >= {"vllm_upgrade", "nccl_ifname", "completion_length", "new_host"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_diff_names_the_change_and_the_matching_cause_first(kb: rltriage.KnowledgeBase, case: Path) -> None:
    expect = _expect(case)
    result, _good, bad = diff_runs([case / "good"], [case / "bad"], kb=kb)
    first = result.changes[0]
    named = [c.kind if c.name == c.kind else f"{c.kind} {c.name}" for c in result.changes]  # the kernel is one value
    assert named[0] == expect["first_change"], named
    assert result.causes[0].rule == expect["first_cause"]
    assert expect["first_change"] in result.causes[0].reads
    assert result.causes[0].rule in first.causes
    if "divergence" in expect:
        assert result.divergence.stage is not None and result.divergence.stage.value == expect["divergence"]
    text = render_diff(kb, result, "text")
    assert first.name in text and expect["first_cause"] in text
    assert first.name in render_diff(kb, result, "markdown")


def test_a_cause_that_reads_a_changed_value_moves_up(kb: rltriage.KnowledgeBase) -> None:
    case = FIXTURES / "diff" / "nccl_ifname"
    result, _good, bad = diff_runs([case / "good"], [case / "bad"], kb=kb)
    top = result.causes[0]
    assert top.score > top.diagnosis_score
    assert all(c.score == c.diagnosis_score for c in result.causes if not c.reads)


def test_the_same_run_twice_has_no_change(kb: rltriage.KnowledgeBase) -> None:
    case = FIXTURES / "diff" / "completion_length" / "good"
    result, _good, _bad = diff_runs([case], [case], kb=kb)
    assert result.changes == [] and result.new_lines == [] and result.divergence.stage is None


def test_the_cli_json_validates_against_the_schema_and_exit_codes_match_diagnose(tmp_path: Path) -> None:
    case = FIXTURES / "diff" / "vllm_upgrade"
    runner = CliRunner()
    result = runner.invoke(main, ["diff", str(case / "good"), str(case / "bad"), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    schema = json.loads((REPO / "schemas" / "diff.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    assert data["changes"][0]["name"] == "vllm"
    missing = runner.invoke(main, ["diff", str(case / "good"), str(tmp_path / "nope")])
    assert missing.exit_code == 2
