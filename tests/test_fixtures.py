"""Every fixture run through the real pipeline, by the library and by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rltriage import KnowledgeBase
from rltriage.cli import main
from rltriage.kb.fixtures import run_inputs
from rltriage.tools.expectations import check_fixture

from .conftest import all_fixtures

FIXTURES = all_fixtures()


@pytest.mark.parametrize("folder", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_expectations(folder: Path, kb: KnowledgeBase) -> None:
    outcome, analysis = check_fixture(folder, kb)
    assert analysis is not None
    assert outcome.ok, "\n".join(outcome.failures)


@pytest.mark.parametrize("folder", FIXTURES, ids=[p.name for p in FIXTURES])
def test_cli_json_equals_library(folder: Path, kb: KnowledgeBase) -> None:
    _outcome, analysis = check_fixture(folder, kb)
    assert analysis is not None
    command = "preflight" if analysis.facts and analysis.facts[0].fields.get("mode") == "preflight" else "diagnose"
    inputs = run_inputs(folder)
    args = [command, "--format", "json", *inputs] if command == "diagnose" else [command, "--format", "json", inputs[0], *(["--env", inputs[1]] if len(inputs) > 1 else [])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 1), result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(analysis.diagnosis.model_dump_json())


def test_there_is_a_fixture_per_stall_bucket_and_a_clean_run() -> None:
    from rltriage.base.vocabulary import STALL_BUCKETS
    from rltriage.kb.fixtures import read_expectation

    expectations = [read_expectation(folder) for folder in FIXTURES]
    primaries = {getattr(e.primary_bucket, "value", e.primary_bucket) for e in expectations if e.mode == "diagnose"}
    missing = [b.value for b in STALL_BUCKETS if b.value not in primaries]
    assert not missing, f"no fixture ranks these stall buckets first: {missing}"
    assert "none" in primaries, "no clean successful run among the fixtures"
