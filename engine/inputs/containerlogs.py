"""Docker's json-file logs (`/var/lib/docker/containers/<id>/<id>-json.log`): one JSON record per
line, the program's output in its `log` field. Read as the output itself, so that signatures and the
failure layer see the lines the program printed. Docker splits a line longer than 16 KiB over
several records, only the last ending in a newline: joining the fields joins them back."""

from __future__ import annotations

import json
import re

# A record as Docker writes it: `{"log":"…","stream":"stderr","time":"…"}`.
RECORD_START = re.compile(rb'\A\s*\{\s*"log"\s*:\s*"')
MAX_CARRY = 4 << 20  # bytes of an unfinished record kept; past it the bytes are handed on as they are


def is_json_file_log(head: bytes) -> bool:
    return RECORD_START.match(head) is not None


class JsonFileDecoder:
    """Turns the bytes of a json-file log into the text of its records, a block at a time."""

    def __init__(self) -> None:
        self._carry = b""
        self.undecodable = 0  # lines that were not a record, handed on as they are

    def decode(self, data: bytes, final: bool = False) -> bytes:
        lines = (self._carry + data).split(b"\n")
        self._carry = lines.pop()
        if final and self._carry:
            lines.append(self._carry)
            self._carry = b""
        elif len(self._carry) > MAX_CARRY:
            lines.append(self._carry)  # not a record anyone wrote: its bytes as they are
            self._carry = b""
        out: list[bytes] = []
        for line in lines:
            out.append(self._text(line))
        return b"".join(out)

    def _text(self, line: bytes) -> bytes:
        if not line.strip():
            return b""
        try:
            record = json.loads(line)
            text = record["log"]
        except (ValueError, KeyError, TypeError):
            self.undecodable += 1
            return line + b"\n"
        if not isinstance(text, str):
            self.undecodable += 1
            return line + b"\n"
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")
