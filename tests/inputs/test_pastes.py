"""A log pasted as an indented block is read without the indentation every line carries."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rltriage
from rltriage import KnowledgeBase
from rltriage.inputs.discover import Checked, Warning
from rltriage.inputs.pastes import IndentStripper, pasted_indent
from rltriage.kb.fixtures import run_inputs

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"

TRACEBACK = b'Traceback (most recent call last):\n  File "/w/train.py", line 3, in <module>\n    main()\ntorch.OutOfMemoryError: CUDA out of memory.\n'


def _indented(text: bytes, indent: bytes = b"    ") -> bytes:
    return b"".join(indent + line if line.strip() else line for line in text.splitlines(keepends=True))


def test_a_block_indented_by_four_spaces_or_a_tab_is_a_paste() -> None:
    assert pasted_indent(_indented(TRACEBACK)) == b"    "
    assert pasted_indent(_indented(TRACEBACK, b"\t")) == b"\t"
    # Blank lines do not count; the deepest indentation all lines share is taken.
    assert pasted_indent(_indented(TRACEBACK + b"\n\n" + TRACEBACK, b"      ")) == b"      "


def test_indentation_a_log_has_of_its_own_is_not_a_paste() -> None:
    assert pasted_indent(TRACEBACK) is None  # the header starts its line
    # tqdm pads its percentage with spaces: two are not a paste's indentation.
    assert pasted_indent(b"  0%|          | 0/100\n  1%|          | 1/100\n  2%|          | 2/100\n") is None
    # Too few lines to tell, unless they are the whole input.
    one = b"    {'loss': 0.0, 'reward_std': 0.0}\n"
    assert pasted_indent(one) is None and pasted_indent(one, whole=True) == b"    "
    # A cut last line is not looked at: it may start without the indentation.
    assert pasted_indent(_indented(TRACEBACK) + b"x") == b"    "


@given(
    st.lists(st.sampled_from([b"    line\n", b"  two\n", b"\n", b"    \n", b"   \n", b"\tx\n", b"    a    b\n", b"no indent\n"]), max_size=30),
    st.lists(st.integers(1, 9), min_size=1, max_size=20),
)
def test_any_read_sizes_give_the_same_text(lines: list[bytes], sizes: list[int]) -> None:
    data = b"".join(lines)
    whole = IndentStripper(b"    ").strip(data, final=True)
    expected = b"".join(line[4:] if line.startswith(b"    ") else line for line in lines)
    assert whole == expected
    stripper, out, at = IndentStripper(b"    "), b"", 0
    for size in sizes * 10:
        out += stripper.strip(data[at : at + size])
        at += size
    out += stripper.strip(data[at:]) + stripper.strip(b"", final=True)
    assert out == expected


def test_the_reader_takes_the_indentation_off_and_says_so() -> None:
    warnings: list[Warning] = []
    # The first read decides, as the pipeline's sniff of several KiB does; any reads after it.
    stream = Checked(io.BytesIO(_indented(TRACEBACK * 3)), "paste.log", warnings)
    out = stream.read(200)
    while chunk := stream.read(7):
        out += chunk
    stream.close()
    assert out == TRACEBACK * 3
    assert [w.message for w in warnings] == ["every line is indented by '    ', as in a pasted block; read without it (12 lines)"]


# Fixtures of different families, each with a traceback, a fatal line or an anchored signature.
PASTED = ["torch/loss_without_grad_fn", "vllm/engine_core_died", "vllm/prompt_too_long", "trl/vllm_server_refused_weight_sync", "ray/actor_died", "deepspeed/cpu_adam_jit_load"]


@pytest.mark.parametrize("name", PASTED)
def test_an_indented_paste_of_a_fixture_is_diagnosed_like_the_fixture(name: str, tmp_path: Path, kb: KnowledgeBase) -> None:
    folder = FIXTURES / name
    if not folder.is_dir():
        pytest.fail(f"fixture {name} is gone: pick another")
    plain = rltriage.diagnose(run_inputs(folder), kb=kb)
    copy = tmp_path / "paste"
    shutil.copytree(folder, copy)
    for path in run_inputs(copy):
        source = Path(path)
        if source.is_file():
            source.write_bytes(_indented(source.read_bytes()))
    pasted = rltriage.diagnose(run_inputs(copy), kb=kb)
    assert pasted.primary_bucket == plain.primary_bucket
    assert [(c.rule, c.bucket) for c in pasted.causes] == [(c.rule, c.bucket) for c in plain.causes]
    assert [(f.type, f.line) for f in pasted.failures] == [(f.type, f.line) for f in plain.failures]
    # The lines are cited as the program printed them.
    assert [e.text for c in pasted.causes for e in c.evidence] == [e.text for c in plain.causes for e in c.evidence]
