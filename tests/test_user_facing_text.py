"""User-facing text names libraries and public documents (torch, NCCL, vLLM, TRL…), never the
knowledge base's own source notes. `source:` is metadata for contributors and may name them; the
reports, the fixes, the patch plans and the verification lines may not."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rltriage import KnowledgeBase
from rltriage.pipeline.render import format_diagnosis
from rltriage.tools.smoke import smoke_text

from .conftest import REPO, builtin_fixture_dirs, rendered

# The shapes of internal notes: the notes files by name, a file's section ("§N"), a playbook. A
# file a command writes (`> stacks-pid41311.txt — then …`) is not one.
INTERNAL = re.compile(r"library-messages|hang-debugger|rl-troubleshooting|playbook|[\w-]+\.(?:txt|md) §|§ ?\d|Run Validation", re.IGNORECASE)
# Internal project names as words; a rule id's namespace (`lego.x`), an environment variable
# (`IMAGINAIRE_OUTPUT_ROOT`) or a default path (`/tmp/imaginaire-output`) quoted from a log is not one.
INTERNAL_WORDS = re.compile(r"(?<![\w./-])(?:lego|imaginaire)(?![\w./-])")
USER_FACING = ("title", "issue", "reason", "fix", "patch_plan", "verify")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_rules_and_fix_templates_name_no_internal_note(kb: KnowledgeBase) -> None:
    found = []
    for loaded in kb.rules:
        data = loaded.model.model_dump(mode="json")
        for key in USER_FACING:
            found += [f"{loaded.origin.display} {key}: {s[:120]}" for s in _strings(data.get(key)) if INTERNAL.search(s) or INTERNAL_WORDS.search(s)]
    for template in sorted((REPO / "templates").rglob("*.j2")):
        text = template.read_text(encoding="utf-8")
        found += [f"{template}: {m.group(0)}" for m in INTERNAL.finditer(text)]
        found += [f"{template}: {m.group(0)}" for m in INTERNAL_WORDS.finditer(re.sub(r"'[\w.]+'", "", text))]
    assert found == []


@pytest.mark.parametrize("folder", builtin_fixture_dirs(), ids=lambda p: str(p.relative_to(REPO / "fixtures")))
def test_every_rendered_fixture_report_names_no_internal_note(folder: Path, kb: KnowledgeBase) -> None:
    fixture = rendered(folder, kb)
    for fmt in ("text", "markdown", "json"):
        report = format_diagnosis(fixture.analysis.diagnosis, fmt, kb)
        assert INTERNAL.findall(report) == [], fmt
    assert INTERNAL.findall(fixture.html) == []


def test_the_smoke_header_names_no_internal_note() -> None:
    result = smoke_text("num_generations: 8\nmax_steps: 500\n", name="c.yaml")
    assert result.notes and INTERNAL.findall(result.text) == []
