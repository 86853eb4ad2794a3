"""Patch plans point at real things: code locations from frames when a stack or traceback names
one, config keys only when the config or the logs show them, one value per key per report."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from rltriage import KnowledgeBase
from rltriage.base.vocabulary import PatchKind
from rltriage.pipeline.render import ConfigView, code_locations
from rltriage.pipeline.run import analyse

from ..conftest import FIXTURES, REPO, builtin_fixture_dirs, rendered

_KEY = re.compile(r"[A-Za-z_][\w.\-]*")
_NUMBER_AFTER_ARROW = re.compile(r"->\s*(?P<new>-?\d+(?:\.\d+)?)\b")


def _causes_steps(folder: Path, kb: KnowledgeBase, rule: str) -> list[tuple[str, str, str]]:
    diagnosis = rendered(folder, kb).analysis.diagnosis
    cause = next(c for c in diagnosis.causes if c.rule == rule)
    return [(s.kind.value, s.target, s.change) for s in cause.patch_plan]


def test_a_file_target_is_the_code_location_the_stack_names(kb: KnowledgeBase) -> None:
    steps = _causes_steps(FIXTURES / "stacks/odd_rank_in_reward", kb, "reward.sympy_in_stack_dump")
    files = [target for kind, target, _change in steps if kind == "file"]
    assert files == ["rewards/math_reward.py:57"]


def test_code_locations_read_traceback_user_frames_and_skip_libraries(tmp_path: Path, kb: KnowledgeBase) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 1146, in _calculate_rewards\n'
        "    output = reward_func(prompts=prompts, completions=completions)\n"
        '  File "/srv/job/rewards/math_reward.py", line 57, in accuracy_reward\n'
        "    return [verify(parse(c)) for c in completions]\n"
        '  File "/usr/lib/python3.11/site-packages/sympy/core/sympify.py", line 481, in sympify\n'
        "    raise SympifyError(a)\n"
        "sympy.core.sympify.SympifyError: SympifyError: 'x'\n",
        encoding="utf-8",
    )
    facts = analyse([str(log)], kb=kb).inference.facts
    assert code_locations(facts) == ["/srv/job/rewards/math_reward.py:57"]
    assert code_locations(facts, "reward") == ["/srv/job/rewards/math_reward.py:57"]
    assert code_locations(facts, "judge") == []


def test_a_config_key_is_proposed_only_when_the_run_shows_it(kb: KnowledgeBase) -> None:
    # The same rule: with `use_vllm` in the run's config it is proposed; without, only the prose names it.
    shown = _causes_steps(FIXTURES / "torch/zero3_late_collective_hang", kb, "torch.collective_timeout_late")
    assert ("config", "use_vllm") in {(k, t) for k, t, _c in shown}
    for folder in ("torch/watchdog_wrapped", "torch/watchdog_stuck"):
        diagnosis = rendered(FIXTURES / folder, kb).analysis.diagnosis
        targets = {s.target for c in diagnosis.causes for s in c.patch_plan if s.kind is PatchKind.config}
        assert not targets & {"use_vllm", "ds3_gather_for_generation"}, folder


@pytest.mark.parametrize("folder", builtin_fixture_dirs(), ids=lambda p: str(p.relative_to(REPO / "fixtures")))
def test_every_fixture_patch_plan_names_shown_keys_and_one_value_per_key(folder: Path, kb: KnowledgeBase) -> None:
    analysis = rendered(folder, kb).analysis
    config = ConfigView([f for f in analysis.inference.facts if f.type == "config"])
    diagnosis = analysis.diagnosis
    values: dict[str, set[str]] = defaultdict(set)
    for cause in diagnosis.causes:
        for step in cause.patch_plan:
            if step.kind is PatchKind.config and _KEY.fullmatch(step.target):
                assert config.has(step.target), f"{cause.rule} proposes {step.target}, which the run does not show"
    for step in [s for c in diagnosis.causes for s in c.patch_plan] + diagnosis.smoke_test:
        number = _NUMBER_AFTER_ARROW.search(step.change)
        if step.kind is PatchKind.config and number:
            values[step.target].add(number["new"])
    assert {k: v for k, v in values.items() if len(v) > 1} == {}
