"""The failure layer through the public API (`rltriage.diagnose` / `rltriage.preflight`), over every
shipped fixture: what a diagnosis must keep once its inputs hold an uncaught failure.

(a) **A failure is explained.** When `diagnosis.failures` is non-empty (a terminal, non-ignored
    failure: the last exception of a chain, a C++ termination, a fatal signal, an exit code), the
    symptom is not `none`, and at least one ranked cause cites — as an evidence `path:line` — the
    line of one of those failures: the report names the crash it explains. Preflight fixtures are
    exempt (they check a config, not a run).

(b) **The report does not deny it.** The rendered text and markdown reports never say
    "Nothing crashed" when `diagnosis.failures` is non-empty, and never "silent for 0 s" (a silence
    of less than a second is no silence).

(c) **Boundary and causes never contradict.** A stage the causes' own evidence proves was reached
    is never reported as missing. Precisely, with EARLY = {model_loaded, trainer_started,
    first_generation_started} (a first missing stage in EARLY says "the first generation never
    started" or earlier):

    (c1) a cause in bucket `reward_blocking` whose evidence includes a failure (a line of some
         failure in `diagnosis.failures`, or evidence the failure layer produced, signature
         `failure`) or a stack-dump frame (signature `stacks.*`) never sits beside a boundary whose
         `first_missing` is in EARLY: a reward ran, so the first generation had finished;
    (c2) a cause in bucket `remote_eval_blocking` whose cited frames include a reward call — a
         traceback frame `File "…", line N, in F` or a dump frame `F (file:line)` with F named like
         one (…reward…, compute_score, score_fn, judge, grader; not get_/load_/build_/create_/init_/
         make_/register_ helpers that run at start-up) — obeys the same rule;
    (c3) a cause whose cited frames include the policy update (compute_loss, backward,
         optimizer_step, update_policy, update_actor, update_critic, ppo_update, train_batch) never
         sits beside a `first_missing` in EARLY ("… before first_generation_started");
    (c4) when the failure's frames place it in a phase (`boundary.phase`), the boundary's last
         completed stage is at least the stage that phase proves: generation → first_generation_started,
         log-probability pass and reward computation → first_generation_finished, policy update →
         reward_computed.

Shipped fixtures that break a property today are listed in KNOWN with the reason, as strict
expected failures: the property stays enforced for every other fixture, and fixing the cause makes
the strict xfail fail until the entry is removed.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

import rltriage
from rltriage import Diagnosis, KnowledgeBase
from rltriage.base.vocabulary import STAGE_ORDER, Stage
from rltriage.kb.fixtures import read_expectation, run_inputs
from rltriage.pipeline.render import format_diagnosis

from ..conftest import FIXTURES, all_fixtures

FOLDERS = all_fixtures()
NAMES = [str(folder.relative_to(FIXTURES)) for folder in FOLDERS]

EARLY = {Stage.model_loaded, Stage.trainer_started, Stage.first_generation_started}
FRAME = re.compile(r'File "[^"]+", line \d+, in (?P<py>[\w.<>]+)|^\s*(?P<dump>[\w.<>]+) \([^()]*:\d+\)\s*$')
REWARD_CALL = re.compile(r"(?i)^(?!(?:get|load|build|create|init|make|register|_load)_)\w*(?:reward|compute_score|score_fn|judge|grader)\w*$")
UPDATE_CALL = re.compile(r"^(?:compute_loss|_compute_loss|backward|_backward|optimizer_step|update_policy|_update_policy|update_actor|update_critic|ppo_update|train_batch)$")
PHASE_PROVES = {
    "the generation (rollout)": Stage.first_generation_started,
    "the log-probability pass": Stage.first_generation_finished,
    "the reward computation": Stage.first_generation_finished,
    "the policy update (loss, backward, optimizer step)": Stage.reward_computed,
}

# Shipped fixtures that break a property today: (property, fixture) -> why.
KNOWN: dict[tuple[str, str], str] = {}


@cache
def diagnosed(name: str) -> Diagnosis:
    folder = FIXTURES / name
    expect = read_expectation(folder)
    inputs = run_inputs(folder)
    if expect.mode == "preflight":
        return rltriage.preflight(inputs)
    return rltriage.diagnose(inputs)


def _params(prop: str) -> list[object]:
    return [
        pytest.param(name, id=name, marks=pytest.mark.xfail(strict=True, reason=KNOWN[(prop, name)])) if (prop, name) in KNOWN else pytest.param(name, id=name)
        for name in NAMES
    ]


def _failure_lines(d: Diagnosis) -> set[tuple[str, int]]:
    return {(f.path, f.line) for f in d.failures}


def _cited_functions(cause: rltriage.Cause) -> list[str]:
    functions = []
    for ev in cause.evidence:
        match = FRAME.search(ev.text)
        if match:
            functions.append((match.group("py") or match.group("dump")).rsplit(".", 1)[-1])
    return functions


def test_the_fixture_set_is_complete() -> None:
    assert len(NAMES) > 300 and all(name in NAMES for prop, name in KNOWN), "a KNOWN entry names a fixture that does not exist"
    assert any(name.startswith("generic/") for name in NAMES)


@pytest.mark.parametrize("name", _params("a"))
def test_a_failure_is_a_failed_run_and_a_cause_cites_it(name: str) -> None:
    d = diagnosed(name)
    if not d.failures or d.mode == "preflight":
        return
    assert d.symptom.value != "none", f"{len(d.failures)} failure(s), first {d.failures[0].path}:{d.failures[0].line}, but symptom none"
    lines = _failure_lines(d)
    cited = [(c.rule, e.path, e.line) for c in d.causes for e in c.evidence if (e.path, e.line) in lines]
    assert cited, f"no cause cites a failure line; failures {sorted(lines)[:5]}, causes {[c.rule for c in d.causes]}"


@pytest.mark.parametrize("name", _params("b"))
def test_b_reports_never_deny_a_failure(name: str, kb: KnowledgeBase) -> None:
    d = diagnosed(name)
    for fmt in ("text", "markdown"):
        report = format_diagnosis(d, fmt, kb)
        if d.failures:
            assert "Nothing crashed" not in report, f"{fmt} report says 'Nothing crashed' beside {len(d.failures)} failure(s)"
        assert "silent for 0 s" not in report, f"{fmt} report says 'silent for 0 s'"


@pytest.mark.parametrize("name", _params("c"))
def test_c_boundary_and_causes_never_contradict(name: str) -> None:
    d = diagnosed(name)
    missing = d.boundary.first_missing
    lines = _failure_lines(d)
    problems = []
    for cause in d.causes:
        functions = _cited_functions(cause)
        cites_failure_or_stack = any(
            (e.path, e.line) in lines or e.signature == "failure" or e.signature.startswith("stacks.") for e in cause.evidence
        )
        if cause.bucket.value == "reward_blocking" and cites_failure_or_stack and missing in EARLY:
            problems.append(f"(c1) {cause.rule} cites a failure or stack frame, but the boundary says {missing.value} never returned")
        if cause.bucket.value == "remote_eval_blocking" and any(REWARD_CALL.match(f) for f in functions) and missing in EARLY:
            problems.append(f"(c2) {cause.rule} cites a reward call, but the boundary says {missing.value} never returned")
        if any(UPDATE_CALL.match(f) for f in functions) and missing in EARLY:
            problems.append(f"(c3) {cause.rule} cites a frame of the update, but the boundary says {missing.value} never returned")
    proven = PHASE_PROVES.get(d.boundary.phase or "")
    if proven is not None:
        last = d.boundary.last_completed
        if last is None or STAGE_ORDER[last] < STAGE_ORDER[proven]:
            problems.append(f"(c4) the failure is placed in {d.boundary.phase}, but the last completed stage is {last.value if last else None}")
    assert not problems, "\n".join(problems)


def test_a_generic_cause_yields_to_the_specific_cause_of_the_same_failure() -> None:
    """torchelastic's -9 is known to a specific rule: the generic SIGKILL cause (which fires on the
    same lines) is not listed beside it, and the failure lines stay cited."""
    d = diagnosed("generic/killed_torchelastic_table_known")
    rules = [c.rule for c in d.causes]
    assert rules[0] == "memory.rank_sigkilled" and "generic.killed" not in rules
    assert _failure_lines(d) & {(e.path, e.line) for e in d.causes[0].evidence}


def test_fallbacks_only_explain_what_nothing_else_does() -> None:
    """A fallback (`generic.unrecognised_*`) is listed only when no other cause explains the run;
    a Ray wrapper line does not add a second fallback beside the remote exception's own."""
    explained = diagnosed("generic/cuda_error_cpp_terminate_ray")
    assert not [c.rule for c in explained.causes if c.rule.startswith("generic.unrecognised_")]
    alone = diagnosed("generic/unrecognised_engine_token_out_of_vocab")
    assert [c.rule for c in alone.causes] == ["generic.unrecognised_engine"]
    assert len(alone.failures) == 3  # the two RayTaskError wrappers and the remote ValueError


def test_ignored_exceptions_and_shutdown_noise_are_no_failure() -> None:
    for name in ("generic/quiet_shutdown_noise", "generic/quiet_warnings_and_retries"):
        d = diagnosed(name)
        assert d.failures == [] and d.symptom.value == "none" and d.causes == [], name


def test_every_generic_fixture_cites_its_failure_in_the_first_cause(kb: KnowledgeBase) -> None:
    """The generic fixtures are about one failure each: when a generic cause ranks first, it cites
    a line the failure layer read (an exception of the chain, a signal, an exit code) first, and the
    causes cite a terminal one among them."""
    ranked_first = set()
    for name in NAMES:
        if not name.startswith("generic/") or name.startswith("generic/quiet_"):
            continue
        d = diagnosed(name)
        assert d.causes, name
        if not d.causes[0].rule.startswith("generic."):
            continue
        ranked_first.add(d.causes[0].rule)
        evidence = d.causes[0].evidence
        assert evidence and evidence[0].signature == "failure", name
        assert _failure_lines(d) & {(e.path, e.line) for c in d.causes for e in c.evidence}, name
    # The generic namespace's own rules; a library namespace's generic-role rule (one read from a
    # library's message rather than the failure's shape) is proved by that namespace's fixtures.
    layer = {r.id for r in kb.rules if r.model.role.value in ("generic", "fallback") and r.id.startswith("generic.")}
    assert not layer - ranked_first, f"generic/fallback rules no generic fixture ranks first: {sorted(layer - ranked_first)}"

