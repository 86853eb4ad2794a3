"""What hides a message in a log line: ANSI colours, carriage-return redraws, launcher prefixes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Colour codes whose ESC byte was lost when the log was copied from a terminal or a web page, as
# Ray's prefixes show them (`[36m(TaskRunner pid=2155)[0m Traceback …`): only at the line's start or
# right after a closing bracket, so `[10m]` in a message stays.
BARE_SGR = re.compile(r"(?:^|(?<=[)\]]))\[\d{1,3}(?:;\d{1,3})*m")


def decolour(text: str) -> str:
    """The text without colour and cursor codes. An escape byte left over (a code cut short, a stray
    ESC) carries no message and is dropped, so no partial code reaches a report."""
    return BARE_SGR.sub("", ANSI.sub("", text).replace("\x1b", ""))
# Ray's prefix of remote output: `(WorkerDict pid=1234, ip=10.0.0.1) `, `(raylet) `, `(autoscaler +2m3s) `.
RAY_PREFIX = re.compile(
    r"^\((?P<actor>[A-Za-z_][\w.:<>\-]*)?(?:,? ?pid=(?P<pid>\d+))?(?:, ip=(?P<ip>[0-9a-fA-F.:]+))?"
    r"(?: \+[\dhms.]+)?\)\s?"
)
RANK_PREFIX = re.compile(r"^\[(?:rank(?P<rank>\d+)|(?P<role>[A-Za-z_]+)(?P<local>\d+))\]:\s?")
# A timestamp in front of the line: `2024-05-01 10:00:00,123`, RFC 3339 `2024-05-01T10:00:00.123456789Z`.
STAMP = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# What a collector adds to every line it stores: `kubectl logs --timestamps`, `docker logs -t`, CI
# runners and log exports put an RFC 3339 stamp with its zone in front, bracketed or not; the node's
# container logs (`/var/log/containers/*.log`, the CRI format of containerd and CRI-O) follow it with
# the stream and a full/partial tag (`stderr F `). The stamp a program's own logger prints
# (`2024-05-01 10:00:00,123 - INFO - …`, no `T`, no zone) is part of its message and stays.
# The compiled matcher (pipeline/matcher.py) builds its prefixes from the same text.
COLLECTOR_STAMP_PATTERN = r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\]?[\t ](?:std(?:out|err) [FP] )?"
COLLECTOR_STAMP = re.compile("^" + COLLECTOR_STAMP_PATTERN)
# A log quoted in a Markdown reply (`> ` in front of each line); `>>>` is Python's prompt, not a quote.
QUOTE_PREFIX = re.compile(r"^> ?(?!>)")
REPEATED = re.compile(r"\s*\[repeated (?P<n>\d+)x across cluster\](?: \(Ray deduplicates logs by default\..*)?$")

# Timestamps as the libraries print them (year-less stamps are placed in a fixed year: only
# differences within one file are used).
_TS_PATTERNS = [
    (re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"), "ymd"),
    (re.compile(r"\b([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"), "glog"),
    (re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"), "vllm"),
]
_BASE = datetime(2000, 1, 1)


@dataclass(frozen=True)
class Segment:
    raw: str  # the segment as it stands in the file (colour codes removed)
    text: str  # the message with launcher prefixes removed
    rank: int | None
    actor: str | None
    repeat: int


def _seconds(month: int, day: int, hh: int, mm: int, ss: int, frac: str | None) -> float | None:
    try:
        stamp = datetime(2000, month, day, hh, mm, ss)
    except ValueError:
        return None
    value = (stamp - _BASE).total_seconds()
    if frac:
        value += float("0." + frac)
    return value


def timestamp(text: str) -> float | None:
    """Seconds since an arbitrary origin for the first timestamp in the text, if any."""
    for pattern, style in _TS_PATTERNS:
        match = pattern.search(text[:120])
        if not match:
            continue
        g = match.groups()
        if style == "ymd":
            return _seconds(int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6])
        if style == "glog":
            return _seconds(int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6])
        return _seconds(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), None)
    return None


def strip_prefixes(text: str) -> tuple[str, int | None, str | None]:
    rank: int | None = None
    actor: str | None = None
    for _ in range(4):
        match = RAY_PREFIX.match(text)
        if match and (match.group("pid") or match.group("actor") in ("raylet", "autoscaler", "scheduler")):
            actor = actor or match.group("actor")
            text = text[match.end():]
            continue
        match = COLLECTOR_STAMP.match(text) or QUOTE_PREFIX.match(text)
        if match:
            text = text[match.end():]
            continue
        match = RANK_PREFIX.match(text)
        if match:
            if match.group("rank") is not None and rank is None:
                rank = int(match.group("rank"))
            elif match.group("local") is not None and rank is None:
                rank = int(match.group("local"))
            text = text[match.end():]
            continue
        break
    return text, rank, actor


def _is_redraw(part: str) -> bool:
    return "%|" in part and ("it/s" in part or "s/it" in part or "?it" in part)


def segments(line: str) -> list[Segment]:
    """Split a physical line into the messages it carries.

    A captured tqdm bar is one physical line of thousands of carriage-return redraws; a message
    printed while the bar runs lands after a redraw. The first and last redraws are kept (they carry
    the start and the furthest progress), the redraws between them are dropped, messages never.
    """
    line = line.rstrip("\n")
    parts = [p for p in line.split("\r") if p.strip()] or [line]
    if len(parts) > 4:
        middle = [p for p in parts[1:-2] if not _is_redraw(p)]
        parts = [parts[0], *middle, *parts[-2:]]
    out = []
    for part in parts:
        raw = decolour(part)
        repeat = 1
        match = REPEATED.search(raw)
        text = raw
        if match:
            repeat = int(match.group("n"))
            text = raw[: match.start()]
        text, rank, actor = strip_prefixes(text)
        out.append(Segment(raw, text, rank, actor, repeat))
    return out
