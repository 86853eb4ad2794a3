"""Scanning: the prefilter, normalised lines, tallies, config echoes, stack headers, unexplained lines."""

from __future__ import annotations

import io

import rltriage
from rltriage.base.vocabulary import InputKind
from rltriage.pipeline.scan import config_keys, failure_template, scanner_for

LOG = b"""2025-05-14 09:00:00 - INFO - num_generations=8 max_completion_length=1024
[rank3]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
[rank5]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
ERROR something nobody has a signature for at 0x7f00aa and /tmp/x/y
Traceback (most recent call last):
"""


def test_a_log_is_scanned_into_tallies() -> None:
    kb = rltriage.load_knowledge_base()
    scan = scanner_for(kb).scan("run.log", InputKind.driver_log, io.BytesIO(LOG))
    assert scan.lines == 5
    tally = next(t for t in scan.tallies.values() if t.signature == "torch.nccl_watchdog_timeout")
    assert tally.count == 2 and tally.ranks == {3, 5}
    assert tally.first is not None and tally.first.line == 2 and tally.first.values["seq"] == 1
    assert {(e.key, e.value) for e in scan.config} >= {("num_generations", "8"), ("max_completion_length", "1024")}
    assert scan.stack_headers == [5]
    assert list(scan.unexplained) == ["ERROR something nobody has a signature for at <hex> and <path>"]


def test_the_scanner_is_built_once_per_knowledge_base() -> None:
    kb = rltriage.load_knowledge_base()
    assert scanner_for(kb) is scanner_for(kb)
    assert "num_generations" in config_keys(kb)


def test_failure_templates_mask_what_varies() -> None:
    assert failure_template("2025-01-01 10:00:00 ERROR rank 3 failed at 10.0.0.1:29500 after 12 s") == "ERROR rank <n> failed at <ip> after <n> s"


def test_a_config_key_in_prose_is_not_an_echo() -> None:
    # After a bare key and a space only a value-shaped word is read: a word of the sentence is not.
    kb = rltriage.load_knowledge_base()
    log = (
        b"WARNING 03-02 08:01:10 scheduler.py:1560] Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory.\n"
        b"+ python3 -m trl vllm-serve --gpu_memory_utilization 0.6 --tensor_parallel_size 2\n"
        b"per_device_train_batch_size 8\n"
        b"Training parameters GRPOConfig(num_generations=8)\n"
    )
    scan = scanner_for(kb).scan("run.log", InputKind.driver_log, io.BytesIO(log))
    echoes = {(e.key, e.value, e.line) for e in scan.config}
    assert {("gpu_memory_utilization", "0.6", 2), ("tensor_parallel_size", "2", 2), ("per_device_train_batch_size", "8", 3)} <= echoes
    assert ("num_generations", "8", 4) in echoes
    assert not [e for e in scan.config if e.line == 1], echoes


def test_a_pyspy_thread_line_opens_a_dump_without_its_header() -> None:
    kb = rltriage.load_knowledge_base()
    log = b'Training from scratch\nThread 418823 (idle): "MainThread"\n    poll (multiprocessing/connection.py:440)\nThread 0x7f01 (most recent call first):\n'
    scan = scanner_for(kb).scan("run.log", InputKind.driver_log, io.BytesIO(log))
    assert scan.stack_headers == [2, 4]
