"""The library as the README shows it: diagnose with a knowledge base loaded once, render a
Diagnosis in each format, enums that print as their values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import rltriage
from rltriage.base.vocabulary import Bucket, Symptom
from rltriage.cli import main
from rltriage.pipeline.run import analyse

from .conftest import FIXTURES, REPO

HANG = FIXTURES / "trl/reward_never_returned"


def test_enums_print_and_format_as_their_values() -> None:
    diagnosis = rltriage.diagnose([HANG])
    assert str(diagnosis.primary_bucket) == "reward_blocking"
    assert f"{diagnosis.primary_bucket} {diagnosis.symptom}" == "reward_blocking hang"
    assert diagnosis.primary_bucket == "reward_blocking" and diagnosis.primary_bucket is Bucket.reward_blocking
    assert str(Symptom.oom) == "oom"


def test_diagnose_with_a_loaded_knowledge_base(tmp_path: Path) -> None:
    from .test_contributor_workflow import RULE, SIGNATURE, TEMPLATE

    pack = tmp_path / "pack"
    for name, text in {
        "signatures/mylab/checkpoint_disk_full.yaml": SIGNATURE,
        "rules/mylab/checkpoint_disk_full.yaml": RULE,
        "templates/fixes/mylab/checkpoint_disk_full.md.j2": TEMPLATE,
    }.items():
        (pack / name).parent.mkdir(parents=True, exist_ok=True)
        (pack / name).write_text(text, encoding="utf-8")
    log = tmp_path / "run.log"
    log.write_text("[rank0]: OSError: [Errno 28] No space left on device: /ckpt/global_step_40/model.safetensors\n", encoding="utf-8")
    kb = rltriage.load_knowledge_base([pack])
    with_pack = rltriage.diagnose([log], kb=kb)
    assert with_pack.causes[0].rule == "mylab.checkpoint_disk_full"  # the private rule is only in kb
    assert "mylab.checkpoint_disk_full" not in [c.rule for c in rltriage.diagnose([log]).causes]
    assert rltriage.preflight([log], kb=kb).mode == "preflight"
    with pytest.raises(ValueError):
        rltriage.diagnose([log], kb=kb, rules_dirs=[pack])


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_render_gives_what_the_command_prints(fmt: str) -> None:
    diagnosis = rltriage.diagnose([HANG])
    rendered = rltriage.render(diagnosis, fmt)
    printed = CliRunner().invoke(main, ["diagnose", "--format", fmt, str(HANG)])
    assert printed.exit_code == 0
    assert rendered == printed.stdout
    if fmt == "json":
        assert rltriage.Diagnosis.model_validate(json.loads(rendered)) == diagnosis
    with pytest.raises(ValueError):
        rltriage.render(diagnosis, "pdf")


def test_the_readme_library_example_runs(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## As a library\s+```python\n(?P<code>.*?)```", readme, re.S)
    assert block is not None
    private = tmp_path / "my_private_rules"
    (private / "rules").mkdir(parents=True)
    code = block["code"].replace('"runs/2025-05-14/"', repr(str(HANG))).replace('"my_private_rules/"', repr(str(private)))
    namespace: dict[str, object] = {"print": lambda *args, **kwargs: None}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    assert isinstance(namespace["diagnosis"], rltriage.Diagnosis)
    assert str(namespace["text"]).startswith("rltriage ")
    assert str(namespace["md"]).lstrip().startswith("#")
    assert "<html" in str(namespace["page"])


def test_an_analysis_without_details_lets_its_inputs_go_and_says_so_when_asked_for_them() -> None:
    light = analyse([str(HANG)], details=False)
    full = analyse([str(HANG)])
    assert light.sources is None and full.sources
    with pytest.raises(ValueError, match="details=False"):
        light.details()
    assert light.diagnosis == full.diagnosis and full.details().excerpts


def test_an_analysis_lists_the_facts_asserted_as_the_engine_numbered_them() -> None:
    analysis = analyse([str(HANG)])
    facts, inference = analysis.facts, analysis.inference
    assert facts[0].type == "run" and [f.id for f in facts] == list(range(len(facts)))
    assert facts == inference.facts[: len(facts)] and len(inference.facts) > len(facts)
    derived = {fact_id for firing in inference.firings for fact_id in firing.derived}
    assert derived and min(derived) >= len(facts)
