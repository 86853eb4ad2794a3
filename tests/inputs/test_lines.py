"""The bounded line reader shared by the stack-dump and timeline readers."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from rltriage.inputs.lines import bounded_lines


def _expected(data: bytes, keep: int) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a final newline ends the last line; it does not start another
    return [line[:keep] for line in lines]


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30), st.booleans(), st.integers(1, 12), st.integers(1, 16))
def test_every_line_cut_to_the_limit_whatever_the_block_size(lines: list[bytes], final_newline: bool, keep: int, block: int) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    assert list(bounded_lines(io.BytesIO(data), keep, block)) == _expected(data, keep)


def test_an_over_long_line_is_never_held_whole() -> None:
    class Counting(io.BytesIO):
        largest = 0

        def read(self, size: int | None = -1, /) -> bytes:
            data = super().read(size)
            Counting.largest = max(Counting.largest, len(data))
            return data

    data = b"first\n" + b"x" * (5 << 20) + b"\nlast"
    assert list(bounded_lines(Counting(data), 10, 1 << 16)) == [b"first", b"x" * 10, b"last"]
    assert Counting.largest == 1 << 16


def test_an_iterable_of_lines_is_cut_the_same_way() -> None:
    assert list(bounded_lines([b"abcdef", b"ab"], 3)) == [b"abc", b"ab"]
