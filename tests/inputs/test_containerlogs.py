"""Docker's json-file logs are read as the text of their records."""

from __future__ import annotations

import io
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import rltriage
from rltriage.inputs.containerlogs import MAX_CARRY, JsonFileDecoder, is_json_file_log
from rltriage.inputs.discover import Checked, Warning


def _record(text: str, stream: str = "stderr") -> bytes:
    # As Docker writes them: no spaces, the newline inside `log`.
    return json.dumps({"log": text, "stream": stream, "time": "2025-05-14T09:13:14.220123456Z"}, separators=(",", ":")).encode() + b"\n"


LINES = ["Traceback (most recent call last):\n", '  File "/w/train.py", line 3, in <module>\n', "torch.OutOfMemoryError: CUDA out of memory. é\n"]
LOG = b"".join(_record(line) for line in LINES)


def test_a_json_file_log_is_recognised_by_its_first_record() -> None:
    assert is_json_file_log(LOG) and is_json_file_log(b' {"log" : "x"}')
    assert not is_json_file_log(b'{"loss": 0.1}') and not is_json_file_log(b"log: x")


def test_records_split_by_docker_are_joined_and_other_lines_kept() -> None:
    decoder = JsonFileDecoder()
    data = _record("a long line, part one; ") + _record("part two\n") + b"not a record\n" + _record("last\n")
    assert decoder.decode(data, final=True) == b"a long line, part one; part two\nnot a record\nlast\n"
    assert decoder.undecodable == 1


@given(st.integers(16, 4096), st.lists(st.integers(1, 64), min_size=1, max_size=40))
def test_any_read_sizes_give_the_same_text(first: int, sizes: list[int]) -> None:
    # The first read tells the format (the pipeline's is a sniff of several KiB); any reads after it.
    stream = Checked(io.BytesIO(LOG), "x-json.log", [])
    out = stream.read(first)
    for size in sizes * 20:
        out += stream.read(size)
    out += stream.read(-1)
    assert out.decode("utf-8") == "".join(LINES)


def test_an_unfinished_record_past_the_bound_is_handed_on() -> None:
    decoder = JsonFileDecoder()
    assert decoder.decode(b'{"log":"' + b"x" * (MAX_CARRY + 1)).startswith(b'{"log":"xxx')


def test_a_failure_in_a_json_file_log_is_cited_on_its_line(tmp_path: Path) -> None:
    log = tmp_path / "abc-json.log"
    log.write_bytes(b"".join(_record(f"step {n}\n") for n in range(5)) + LOG)
    diagnosis = rltriage.diagnose([log])
    (failure,) = diagnosis.failures
    assert failure.type == "OutOfMemoryError" and failure.line == 8
    warnings: list[Warning] = []
    stream = Checked(io.BytesIO(LOG), "abc-json.log", warnings)
    stream.read(10)
    stream.read(-1)
    stream.close()
    assert [w.message for w in warnings] == ["Docker json-file log; read as the text of its records"]
