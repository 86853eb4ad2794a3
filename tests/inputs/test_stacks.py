"""Stack dumps: py-spy, faulthandler and tracebacks into thread stacks; the odd process out."""

from __future__ import annotations

from rltriage.inputs.stacks import odd_one_out, parse_dumps, process_of

PYSPY = """Process 4121: python train.py
Python v3.11.9 (/usr/bin/python3.11)

Thread 4121 (idle): "MainThread"
    read (ssl.py:1134)
    _call_judge (reward.py:42)
    train (trl/trainer/grpo_trainer.py:812)
Thread 4200 (idle): "pin_memory"
    wait (threading.py:320)
"""


def _numbered(text: str) -> list[tuple[int, str]]:
    return list(enumerate(text.splitlines(), 1))


def test_a_pyspy_dump() -> None:
    lines = _numbered(PYSPY)
    stacks = parse_dumps("stacks.txt", lines, [1])
    main = [s for s in stacks if s.main]
    assert len(main) == 1 and main[0].process == "pid4121" and main[0].kind == "pyspy"
    assert main[0].frames[0].text == "read (ssl.py:1134)" and main[0].frames[0].log_line == 5
    assert {s.thread for s in stacks} == {"4121", "4200"}


def test_a_traceback_lists_the_innermost_frame_first() -> None:
    text = 'Traceback (most recent call last):\n  File "train.py", line 10, in main\n  File "reward.py", line 3, in score\nTimeoutError: late\n'
    [stack] = parse_dumps("rank2.log", _numbered(text), [1])
    assert stack.kind == "traceback" and stack.process == "rank2"
    assert [f.func for f in stack.frames] == ["score", "main"]


def test_the_odd_process_out() -> None:
    def faulthandler(func: str) -> str:
        return f'Current thread 0x00007f (most recent call first):\n  File "x.py", line 1 in {func}\n'

    stacks = []
    for rank, func in enumerate(["all_reduce", "all_reduce", "all_reduce", "_sympify"]):
        stacks += parse_dumps(f"stacks-rank{rank}.txt", _numbered(faulthandler(func)), [1])
    outlier = odd_one_out(stacks)
    assert outlier is not None and outlier.stack.process == "rank3" and outlier.majority_count == 3 and outlier.total == 4
    assert odd_one_out(stacks[:2]) is None
    assert process_of("logs/rank12.txt") == "rank12" and process_of("dump.txt") == "dump.txt"
