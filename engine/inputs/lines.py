"""The one bounded line reader: the lines of a byte stream, each cut to a byte limit, read in
blocks so that a line of a gigabyte is never held whole."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

BLOCK = 1 << 20


def bounded_lines(stream: Iterable[bytes] | Any, keep: int, block: int = BLOCK) -> Iterator[bytes]:
    """The lines of `stream` without their newline, each cut to its first `keep` bytes; the rest
    of an over-long line is skipped. Numbered as the scanner numbers them: a last line without a
    newline counts. A stream without `read` is taken as an iterable of lines, each cut the same way."""
    read = getattr(stream, "read", None)
    if read is None:
        for raw in stream:
            yield raw[:keep]
        return
    pending = b""
    skipping = False  # inside an over-long line whose first `keep` bytes were given
    while True:
        data = read(block)
        if not data:
            break
        pieces = (pending + data).split(b"\n")
        pending = pieces.pop()
        for raw in pieces:
            if skipping:
                skipping = False
                continue  # the rest of a cut line
            yield raw[:keep]
        if len(pending) > keep:
            if not skipping:
                yield pending[:keep]
            skipping = True
            pending = b""
    if pending and not skipping:
        yield pending[:keep]
