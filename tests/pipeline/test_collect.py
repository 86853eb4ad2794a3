"""What to collect next: the piece of evidence that separates two tied causes, and the tie it resolves."""

from __future__ import annotations

from pathlib import Path

import pytest

import rltriage
from rltriage.kb.fixtures import run_inputs
from rltriage.pipeline.collect import CLOSE_MARGIN
from rltriage.pipeline.render import format_diagnosis
from rltriage.pipeline.run import analyse
from rltriage.tools.explain import explain

from ..conftest import FIXTURES

# (tied fixture, the same run with the piece added, the item that names the piece, the cause the
# piece confirms, the cause it rules out)
PAIRS = [
    # reward: a remote judge that timed out, or a local reward that blocks — a py-spy dump of the stall
    ("remote/async_judge_timeout", "remote/async_judge_timeout_remote_stack", "py_spy_dump", "remote.asyncio_timeout_in_reward", "trl.reward_never_returned"),
    ("remote/async_judge_timeout", "trl/async_judge_timeout_local_stack", "py_spy_dump", "trl.reward_never_returned", "remote.asyncio_timeout_in_reward"),
    # memory vs rollout: the main thread caught in cudaMalloc during the first generation — nvidia-smi during the stall
    ("stacks/native_allocator", "stacks/native_allocator_smi_full", "nvidia_smi", "stacks.stuck_in_allocator", "vllm.first_generation_never_finished"),
    ("stacks/native_allocator", "stacks/native_allocator_smi_room", "nvidia_smi", "vllm.first_generation_never_finished", "stacks.stuck_in_allocator"),
    # distributed vs kernel: the first collective timed out on a host with kernel 5.4 — NCCL_DEBUG=INFO
    ("accelerate/old_kernel_first_collective", "accelerate/old_kernel_first_collective_nccl_docker0", "nccl_debug", "torch.collective_timeout_at_setup", "accelerate.old_kernel_hang_risk"),
    ("accelerate/old_kernel_first_collective", "accelerate/old_kernel_first_collective_nccl_init_complete", "nccl_debug", "accelerate.old_kernel_hang_risk", "torch.collective_timeout_at_setup"),
    # kernel: libcudart.so.13 missing for torch_memory_saver's hook — the wrong hook build, or the missing runtime? pip freeze (torch's +cuXXX)
    ("kernels/tms_cdll", "kernels/tms_cdll_freeze_cu12", "pip_freeze", "kernels.tms_binary_unloadable", "kernels.cuda_library_missing"),
    ("kernels/tms_cdll", "kernels/tms_cdll_freeze_cu13", "pip_freeze", "kernels.cuda_library_missing", "kernels.tms_binary_unloadable"),
    # rollout vs generation settings: the first generation of 8k-token completions has not returned — stuck or slow? the engine's statistics
    ("trl/long_completions_first_rollout", "trl/long_completions_first_rollout_engine_busy", "vllm_log_stats", "trl.long_completions_first_rollout", "vllm.first_generation_never_finished"),
    ("trl/long_completions_first_rollout", "trl/long_completions_first_rollout_engine_idle", "vllm_log_stats", "vllm.first_generation_never_finished", "trl.long_completions_first_rollout"),
    # distributed: an all-reduce timed out after 41 steps over NCCL's socket fallback — a straggler or the transport? py-spy dumps of every rank
    ("torch/late_timeout_over_sockets", "torch/late_timeout_over_sockets_dumps_straggler", "py_spy_dump", "torch.collective_timeout_late", "nccl.socket_fallback_slow"),
    ("torch/late_timeout_over_sockets", "torch/late_timeout_over_sockets_dumps_all_in_collective", "py_spy_dump", "nccl.socket_fallback_slow", "torch.collective_timeout_late"),
]


def _scores(analysis: object) -> dict[str, float]:
    return {c.rule: c.score for c in analysis.diagnosis.causes}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("tied", "resolved", "item", "winner", "loser"), PAIRS, ids=[p[1] for p in PAIRS])
def test_the_report_names_the_piece_and_adding_it_resolves_the_tie(
    kb: rltriage.KnowledgeBase, tied: str, resolved: str, item: str, winner: str, loser: str
) -> None:
    before = analyse(run_inputs(FIXTURES / tied), kb=kb)
    scores = _scores(before)
    assert winner in scores and loser in scores
    assert abs(scores[winner] - scores[loser]) <= CLOSE_MARGIN, "the two causes must be tied before the piece arrives"
    collect = before.diagnosis.collect
    assert collect and collect[0].id == item, [c.id for c in collect]
    assert winner in collect[0].confirms + collect[0].rules_out and loser in collect[0].confirms + collect[0].rules_out
    text = format_diagnosis(before.diagnosis, "text", kb)
    assert "What to collect next" in text and collect[0].command in text
    assert collect[0].command in format_diagnosis(before.diagnosis, "markdown", kb)
    assert f'"id": "{item}"' in format_diagnosis(before.diagnosis, "json", kb)

    after = analyse(run_inputs(FIXTURES / resolved), kb=kb)
    ranked = [c.rule for c in after.diagnosis.causes]
    resolved_scores = _scores(after)
    assert winner in ranked
    assert loser not in ranked or ranked.index(winner) < ranked.index(loser)
    assert resolved_scores[winner] - resolved_scores.get(loser, 0.0) > CLOSE_MARGIN
    assert item not in [c.id for c in after.diagnosis.collect], "the piece is in the inputs now"


def test_the_tied_pairs_cover_the_buckets_the_issue_names(kb: rltriage.KnowledgeBase) -> None:
    """Each bucket wins at least one pair: distributed, memory, reward, rollout and kernel."""
    buckets = set()
    for _tied, _resolved, _item, winner, _loser in PAIRS:
        loaded = kb.rule(winner)
        assert loaded is not None and loaded.model.bucket is not None
        buckets.add(loaded.model.bucket.value)
    assert {"distributed_sync", "vram_pressure", "reward_blocking", "remote_eval_blocking", "rollout_hang", "kernel_runtime"} <= buckets
    assert len({p[0] for p in PAIRS}) >= 6, "at least six distinct tied situations"
    assert all(sum(p[0] == tied for p in PAIRS) == 2 for tied in {p[0] for p in PAIRS}), "each tie is resolved both ways"


def test_explain_says_why_each_item_was_chosen(kb: rltriage.KnowledgeBase) -> None:
    analysis = analyse(run_inputs(FIXTURES / "remote/async_judge_timeout"), kb=kb)
    text = explain(analysis)
    assert "what to collect next (why each item was chosen)" in text
    assert "the top causes are close" in text
    assert "confirms one and rules out the other" in text
    assert "trl.reward_never_returned rules out on hit(" in text


def test_an_item_that_would_confirm_both_causes_does_not_separate_them(kb: rltriage.KnowledgeBase, tmp_path: Path) -> None:
    from rltriage.pipeline.collect import Outcome, _pair_points

    same = [Outcome("a", "confirms", "hit(signature='x')")]
    also = [Outcome("b", "confirms", "hit(signature='x')")]
    opposite = [Outcome("b", "rules_out", "hit(signature='x')")]
    assert _pair_points(same, also)[0] == 0.0
    assert _pair_points(same, opposite)[0] > _pair_points(same, [])[0] > 0.0


def test_a_decisive_diagnosis_asks_for_nothing(kb: rltriage.KnowledgeBase) -> None:
    analysis = analyse(run_inputs(FIXTURES / "kernels/flash_attn_abi"), kb=kb)
    assert analysis.diagnosis.collect == []
    assert "What to collect next" not in format_diagnosis(analysis.diagnosis, "text", kb)


def test_a_pasted_traceback_is_thin_evidence(kb: rltriage.KnowledgeBase, tmp_path: Path) -> None:
    log = tmp_path / "paste.txt"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 12, in <module>\n'
        "    import flash_attn_2_cuda\n"
        "ModuleNotFoundError: No module named 'flash_attn_2_cuda'\n"
    )
    analysis = analyse([str(log)], kb=kb)
    d = analysis.diagnosis
    assert d.collect, "a single pasted traceback leaves the evidence thin"
    assert any("a single input file" in r for r in d.collect_reasons)
    ids = [c.id for c in d.collect]
    assert "collect_env" in ids or "pip_freeze" in ids


def test_a_single_weak_cause_asks_first_for_what_would_confirm_it(kb: rltriage.KnowledgeBase) -> None:
    """A rank SIGKILLed without a traceback: the report asks for the node's kernel log before the
    gap fillers, and with it the host OOM killer is the cause."""
    before = analyse(run_inputs(FIXTURES / "memory/rank_sigkilled"), kb=kb)
    assert [c.rule for c in before.diagnosis.causes][0] == "memory.rank_sigkilled"
    first = before.diagnosis.collect[0]
    assert first.id == "dmesg_xid_oom" and "memory.rank_sigkilled" in first.confirms
    assert "dmesg -T" in format_diagnosis(before.diagnosis, "text", kb)

    after = analyse(run_inputs(FIXTURES / "memory/rank_sigkilled_dmesg"), kb=kb)
    assert after.diagnosis.causes[0].rule == "memory.host_oom_killed"
    assert after.diagnosis.causes[0].score >= 0.8
    assert "dmesg_xid_oom" not in [c.id for c in after.diagnosis.collect]


def test_a_rank_counts_as_logged_only_where_a_rank_log_names_its_number_whole() -> None:
    from rltriage.base.vocabulary import InputKind
    from rltriage.infer.fact import Fact
    from rltriage.pipeline.collect import run_names
    from rltriage.pipeline.scan import FileScan

    failed = [Fact(i, "failure", {"process": f"rank{r}"}) for i, r in enumerate((1, 3, 12, 7))]
    scans = [
        FileScan("logs/rank12.log", InputKind.rank_log),  # 12, not 1
        FileScan("logs/rank03.log", InputKind.rank_log),  # 03 is not 3's number as written
        FileScan("logs/worker-7.log", InputKind.rank_log),
        FileScan("logs/driver1.log", InputKind.driver_log),  # not a rank log
    ]
    names = run_names(failed, scans)
    assert names["ranks"] == [1, 3, 7, 12]
    assert names["missing_ranks"] == [1, 3]


def test_names_are_read_from_the_texts_that_hold_their_words() -> None:
    from rltriage.infer.fact import Cited, Fact
    from rltriage.pipeline.collect import run_names

    line = "worker pid=4242 ip=10.0.0.7 on pods/trainer-0"
    cited = (Cited("a.log", 3, line, "k8s.pod_line"),)
    facts = [
        Fact(0, "failure", {"text": line}, cited),  # a failure's text: no pod is read from it
        Fact(1, "hit", {"text": line}, cited),  # the same text on a hit: its pod is read
        Fact(2, "hit", {"text": "pid=77 ip=10.0.0.8"}, ()),
    ]
    names = run_names(facts, [])
    assert names["pids"] == ["4242", "77"]
    assert names["ips"] == ["10.0.0.7", "10.0.0.8"]
    assert names["pods"] == ["trainer-0"]
