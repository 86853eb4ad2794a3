"""A run of many ranks, each printing the same lines, is diagnosed: rules that join one rank's
lines with every other rank's do not turn the rank count squared into firings."""

from __future__ import annotations

from pathlib import Path

import rltriage
from rltriage.infer.results import MAX_CONCLUDING_FIRINGS
from rltriage.pipeline.run import analyse

# What each rank of a hung GRPO step prints with NCCL_DEBUG=INFO: its communicator built, the
# trainer's bar, a vLLM bar, then the watchdog's timeout.
RANK_LOG = """[INFO|trainer.py:2414] 2025-05-14 09:13:14,220 >> ***** Running training *****
  0%|          | 0/500 [00:00<?, ?it/s]
node-{node}:{pid}:{pid} [{dev}] NCCL INFO comm 0x7f3a{rank:04x} rank {rank} nranks {ranks} cudaDev {dev} nvmlDev {dev} busId 1b000 commId 0x5b1c - Init COMPLETE
Processed prompts: 100%|##########| 64/64 [00:05<00:00, 12.00it/s, est. speed input: 100.00 toks/s, output: 900.00 toks/s]
[rank{rank}]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
"""


def test_three_hundred_ranks_with_the_same_lines_are_diagnosed(tmp_path: Path) -> None:
    ranks = 300
    for rank in range(ranks):
        text = RANK_LOG.format(node=rank // 8, pid=1000 + rank, dev=rank % 8, rank=rank, ranks=ranks)
        (tmp_path / f"rank{rank}.log").write_text(text, encoding="utf-8")
    analysis = analyse([str(tmp_path)], kb=rltriage.load_knowledge_base())
    causes = [cause.rule for cause in analysis.diagnosis.causes]
    assert "torch.collective_timeout_at_setup" in causes, causes
    per_rule: dict[str, int] = {}
    for firing in analysis.inference.firings:
        per_rule[firing.rule] = per_rule.get(firing.rule, 0) + 1
    # Without the cap, the rules joining every rank's timeout with every rank's `Init COMPLETE`
    # (or every generation bar with every trainer bar) would fire 90,000 times each.
    assert max(per_rule.values()) <= max(ranks, MAX_CONCLUDING_FIRINGS + 1), sorted(per_rule.items(), key=lambda item: -item[1])[:5]
