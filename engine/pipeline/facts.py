"""Stage 3 — facts: typed facts from the scan, from config files, environment reports and stack dumps."""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from ..base.values import coerce_config
from ..base.vocabulary import LOG_KINDS, NEXT_STAGE, STAGE_ORDER
from ..infer.fact import BaseFact, Cited, FieldView, Read
from ..inputs.configs import read_config
from ..inputs.discover import Source, Warning
from ..inputs.failures import KNOWN_PACKAGES, ParsedFailure, TraceFrame
from ..inputs.stacks import Frame, ThreadStack, odd_one_out, parse_dumps, process_of, read_blocks
from ..kb.knowledge import KnowledgeBase
from ..kb.regexes import REGEX_TIMEOUT, timed_out
from .redact import CUT_MARGIN, cut
from .scan import MAX_TEXT, ByteStream, FileScan, Tally, extract, failure_template

_PIP = re.compile(r"^(?:\[(?:pip\d?|conda)\]\s+)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])?\s*(?:===?|\s+)\s*(?P<version>\d[\w.+\-!]*)\s*(?:\S+\s*)*$")
_TORCH = re.compile(r"^PyTorch version:\s*(?P<version>\S+)")
_PLATFORM = re.compile(r"^Python platform:\s*Linux-(?P<kernel>\d+\.\d+[\w.\-]*?)-(?:x86_64|aarch64|ppc64le)")
_UNAME = re.compile(r"^Linux \S+ (?P<kernel>\d+\.\d+\.\d+[\w.\-]*) #")
_SYSTEM = (
    ("driver", re.compile(r"^(?:Nvidia driver version|NVIDIA driver version|Driver Version)\s*:\s*(?P<value>\d+\.\d+(?:\.\d+)?)")),
    ("cuda_runtime", re.compile(r"^CUDA runtime version\s*:\s*(?P<value>\d+\.\d+(?:\.\d+)?)")),
    ("cuda_build", re.compile(r"^CUDA used to build PyTorch\s*:\s*(?P<value>\d+\.\d+(?:\.\d+)?)")),
    ("os", re.compile(r"^OS\s*:\s*(?P<value>.+?)\s*$")),
    ("python", re.compile(r"^Python version\s*:\s*(?P<value>\d+\.\d+\.\d+)")),
    ("gpu", re.compile(r"^(?:GPU models and configuration\s*:\s*)?GPU 0\s*:\s*(?P<value>.+?)\s*$")),
    ("glibc", re.compile(r"^(?:Libc version|GLIBC version)\s*:\s*(?P<value>.+?)\s*$")),
)
# nvidia-smi's header: `| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |`
_SMI = re.compile(r"NVIDIA-SMI \S+\s+Driver Version:\s*(?P<driver>[\d.]+)\s+CUDA Version:\s*(?P<cuda>[\d.]+)")
_ENV_LINE = re.compile(r"^(?:export\s+)?(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
_KERNEL = re.compile(r"^(?:Kernel(?: version)?|uname -r)\s*[:=]\s*(?P<kernel>\d+\.\d+\.\d+[\w.\-]*)", re.IGNORECASE)


def hit_facts(scan: FileScan) -> list[BaseFact]:
    """A `hit` fact per signature a file matched: the values of its first line, those of its last
    line as `last_<name>`, and where and how often it matched. Its fields are read from the scan and
    the tally (`FieldView`), in the order a dict built value by value would have them."""
    facts = []
    for key in sorted(scan.tallies):
        tally = scan.tallies[key]
        assert tally.first is not None
        last = tally.last if tally.last is not None else tally.first
        table = _hit_table(tuple(tally.first.values), tuple(last.values))
        facts.append(BaseFact("hit", FieldView(table, scan, tally), tally_evidence(scan.path, tally)))
    return facts + env_facts(scan)


def _first_value(name: str) -> Read:
    return lambda scan, tally: tally.first.values[name]


def _last_value(name: str) -> Read:
    return lambda scan, tally: (tally.last if tally.last is not None else tally.first).values[name]


# Fields every hit fact has, after its values; a value of the same name keeps its place but gives way.
_HIT_FIELDS: dict[str, Read] = {
    "signature": lambda scan, tally: tally.signature,
    "path": lambda scan, tally: scan.path,
    "kind": lambda scan, tally: scan.kind.value,
    "count": lambda scan, tally: tally.count,
    "line": lambda scan, tally: tally.first.line,
    "text": lambda scan, tally: tally.first.text,
    "rank": lambda scan, tally: tally.first.rank,
    "ranks": lambda scan, tally: len(tally.ranks),
    "timestamp": lambda scan, tally: tally.first.timestamp,
}


@functools.cache
def _hit_table(first: tuple[str, ...], last: tuple[str, ...]) -> dict[str, Read]:
    """How to read a hit fact's fields, by the names of its first and last lines' values. Assigned
    in the order a dict is updated in, so a name given twice keeps its first place and its last
    value."""
    table: dict[str, Read] = {}
    for name in first:
        table[name] = _first_value(name)
    for name in last:
        table[_last_name(name)] = _last_value(name)
    table.update(_HIT_FIELDS)
    return table


@functools.cache
def _last_name(name: str) -> str:
    """`last_<name>`, one string per name however many facts carry it."""
    return f"last_{name}"


def env_facts(scan: FileScan) -> list[BaseFact]:
    """Environment variables printed in a log: signatures with a group of type `env` (a printed
    `os.environ`, Ray's `env_vars`, `export` lines, NCCL's echoes) keep the pairs as a mapping;
    each pair becomes an `env` fact, the first value of a name winning."""
    facts: list[BaseFact] = []
    seen: set[str] = set()
    for key in sorted(scan.tallies):
        tally = scan.tallies[key]
        for record in (tally.first, *tally.samples, tally.last):
            if record is None:
                continue
            for value in record.values.values():
                if not isinstance(value, dict):
                    continue
                for name, item in value.items():
                    if name in seen:
                        continue
                    seen.add(name)
                    evidence = (Cited(path=scan.path, line=record.line, text=record.text, signature=tally.signature),)
                    fields = {"name": name, "value": str(item), "path": scan.path, "line": record.line, "source": "log"}
                    facts.append(BaseFact("env", fields, evidence))
    return facts


def tally_evidence(path: str, tally: Tally) -> tuple[Cited, ...]:
    records = [tally.first, *tally.samples, tally.last]
    seen: set[int] = set()
    out = []
    for record in records:
        if record is None or record.line in seen:
            continue
        seen.add(record.line)
        out.append(Cited(path=path, line=record.line, text=record.text, signature=tally.signature))
    return tuple(out)


def echo_facts(scan: FileScan) -> list[BaseFact]:
    facts = []
    seen: set[tuple[str, str]] = set()
    for echo in scan.config:
        if (echo.key, echo.value) in seen:
            continue
        seen.add((echo.key, echo.value))
        evidence = (Cited(path=scan.path, line=echo.line, text=echo.text, signature=f"config:{echo.key}"),)
        fields = {"key": echo.key, "name": echo.key.rsplit(".", 1)[-1], "value": coerce_config(echo.value), "path": scan.path, "line": echo.line, "source": "log"}
        facts.append(BaseFact("config", fields, evidence))
    return facts


def config_file_facts(display: str, data: bytes | BinaryIO, warnings: list[str]) -> list[BaseFact]:
    """Config facts of one config file (see `inputs.configs` for how its size and shape are bounded)."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    facts = []
    for entry in read_config(display, stream, warnings):
        line = max(entry.line, 1)
        evidence = (Cited(path=display, line=line, text=entry.text, signature=f"config:{entry.key}"),)
        fields = {"key": entry.key, "name": entry.key.rsplit(".", 1)[-1], "value": entry.value, "path": display, "line": line, "source": "file"}
        facts.append(BaseFact("config", fields, evidence))
    return facts


def env_report_facts(display: str, lines: Iterable[tuple[int, str]]) -> list[BaseFact]:
    facts: list[BaseFact] = []
    seen: set[tuple[str, str]] = set()

    def add(type_: str, fields: dict[str, Any], line_no: int, text: str, name: str) -> None:
        key = (type_, name)
        if key in seen:
            return
        seen.add(key)
        fields.update(path=display, line=line_no)
        facts.append(BaseFact(type_, fields, (Cited(path=display, line=line_no, text=text, signature=f"env:{type_}"),)))

    for line_no, raw in lines:
        text = raw.rstrip("\r\n")
        stripped = text.strip()
        for pattern in (_PLATFORM, _UNAME, _KERNEL):
            match = pattern.match(stripped)
            if match:
                add("kernel", {"version": match.group("kernel")}, line_no, text, "kernel")
        for name, pattern in _SYSTEM:
            match = pattern.match(stripped)
            if match:
                add("system", {"name": name, "value": match.group("value")}, line_no, text, f"system:{name}")
        match = _SMI.search(stripped)
        if match:
            add("system", {"name": "driver", "value": match.group("driver")}, line_no, text, "system:driver")
            add("system", {"name": "cuda_driver", "value": match.group("cuda")}, line_no, text, "system:cuda_driver")
            continue
        match = _ENV_LINE.match(stripped)
        if match:
            add("env", {"name": match.group("name"), "value": match.group("value").strip().strip("'\""), "source": "env_report"}, line_no, text, f"env:{match.group('name')}")
            continue
        match = _TORCH.match(stripped)
        if match:
            add("package", {"name": "torch", "version": match.group("version")}, line_no, text, "torch")
            continue
        match = _PIP.match(stripped)
        if match and ("==" in stripped or stripped.startswith("[")):
            name = match.group("name").lower().replace("_", "-")
            add("package", {"name": name, "version": match.group("version")}, line_no, text, name)
    return facts


def numbered_lines(stream: ByteStream, limit: int, notes: list[str] | None = None) -> Iterator[tuple[int, str]]:
    """The lines of a stream, numbered, read a block at a time up to `limit` bytes (each line cut to
    4 KiB); a longer stream gives one note."""
    pending = b""
    total = 0
    number = 0
    while True:
        block = stream.read(min(1 << 20, limit - total)) if total < limit else b""
        total += len(block)
        pieces = (pending + block).split(b"\n")
        pending = pieces.pop()
        if not block and pending:
            pieces.append(pending)  # the last line, without its newline
        for raw in pieces:
            number += 1
            yield number, raw[:4096].decode("utf-8", "replace")
        if not block:
            if total >= limit and stream.read(1) and notes is not None:
                notes.append(f"environment report larger than {limit >> 20} MiB; read its first {limit >> 20} MiB")
            return


def run_facts(mode: str, scans: list[FileScan], inputs: int) -> list[BaseFact]:
    logs = [s for s in scans if s.kind in LOG_KINDS]
    facts = [BaseFact("run", {"mode": mode, "inputs": inputs, "logs": len(logs), "log_lines": sum(s.lines for s in logs)})]
    for scan in scans:
        facts.append(BaseFact("input", FieldView(_INPUT_READS, scan)))
    facts.extend(stage_definitions())
    return facts


# An input fact's fields, read from the file's scan.
_INPUT_READS: dict[str, Read] = {
    "path": lambda scan, _: scan.path,
    "kind": lambda scan, _: scan.kind.value,
    "lines": lambda scan, _: scan.lines,
}


def stage_definitions() -> list[BaseFact]:
    return [
        BaseFact("stage_def", {"name": stage.value, "order": STAGE_ORDER[stage], "next": nxt.value if nxt else None})
        for stage, nxt in NEXT_STAGE.items()
    ]


CRASH_DUMP_DISTANCE = 8  # lines between `Fatal Python error:` and the dump it prints


def _crash_dumps_marked(scan: FileScan, stacks: list[ThreadStack]) -> list[ThreadStack]:
    """faulthandler's dump right after `Fatal Python error:` shows where a process crashed, not
    where a live one waits: its stacks are `crash` dumps, which hang rules (pyspy, faulthandler)
    do not read."""
    fatal = [f.line for f in scan.failures if f.kind == "fatal"]
    if not fatal:
        return stacks
    for stack in stacks:
        if stack.kind == "faulthandler" and any(0 < stack.header_line - line <= CRASH_DUMP_DISTANCE for line in fatal):
            stack.kind = "crash"
    return stacks


def stack_facts(kb: KnowledgeBase, sources: dict[str, Source], scans: list[FileScan], warnings: list[Warning]) -> list[BaseFact]:
    """Facts from the stack dumps and tracebacks the scanner saw: frame-signature hits, each main
    thread's stack, and the process that is not doing what all the others do."""
    frame_signatures = [s for s in kb.signatures.values() if s.model.scope == "frame"]
    stacks: list[ThreadStack] = []
    texts: dict[tuple[str, int], str] = {}
    kinds: dict[str, str] = {}
    for scan in scans:
        source = sources.get(scan.path)
        if not scan.stack_headers or source is None:
            continue
        try:
            with source.open() as stream:
                numbered = read_blocks(stream, scan.stack_headers, keep=MAX_TEXT + CUT_MARGIN)
        except OSError as exc:
            warnings.append(Warning(scan.path, f"stack dump could not be re-read: {exc}"))
            continue
        texts.update(((scan.path, number), cut(text, MAX_TEXT)) for number, text in numbered)
        kinds[scan.path] = scan.kind.value
        stacks.extend(_crash_dumps_marked(scan, parse_dumps(scan.path, numbered, scan.stack_headers)))
    facts: list[BaseFact] = []
    for stack in stacks:
        stack_id = f"{stack.path}:{stack.header_line}:{stack.thread}"

        def evidence(frame: Frame, label: str, path: str = stack.path) -> Cited:
            return Cited(path=path, line=frame.log_line, text=texts.get((path, frame.log_line), frame.text), signature=label)

        common = {"path": stack.path, "process": stack.process, "thread": stack.thread, "main": stack.main, "stack": stack_id, "dump": stack.kind, "state": stack.state}
        top = stack.frames[0]
        if stack.main:
            fields = {**common, "kind": kinds.get(stack.path), "top": top.text, "depth": len(stack.frames), "line": top.log_line}
            facts.append(BaseFact("stack", fields, (evidence(top, f"stack:{stack.kind}"),)))
        for sig in frame_signatures:
            for depth, frame in enumerate(stack.frames):
                try:
                    match = sig.regex.search(frame.text)
                except TimeoutError:
                    if timed_out(sig.regex):
                        warnings.append(Warning(stack.path, f"line {frame.log_line}: signature {sig.id} gave up after {REGEX_TIMEOUT}s; disabled for the rest of the run"))
                    break
                if match is None:
                    continue
                fields = dict(extract(sig, match))
                fields.update(common)
                fields.update(signature=sig.id, kind=kinds.get(stack.path), count=1, line=frame.log_line, text=frame.text, rank=None, ranks=0, timestamp=None, depth=depth)
                facts.append(BaseFact("hit", fields, (evidence(frame, sig.id),)))
                break  # the innermost frame a signature matches says where the thread is
    outlier = odd_one_out(stacks)
    if outlier is not None:
        odd = outlier.stack
        fields = {
            "path": odd.path, "process": odd.process, "thread": odd.thread, "top": odd.frames[0].text, "line": odd.frames[0].log_line,
            "majority_top": outlier.majority[0] if outlier.majority else "", "majority_count": outlier.majority_count, "total": outlier.total,
        }
        ev = Cited(path=odd.path, line=odd.frames[0].log_line, text=texts.get((odd.path, odd.frames[0].log_line), odd.frames[0].text), signature="stack:outlier")
        facts.append(BaseFact("stack_outlier", fields, (ev,)))
    return facts


MAX_TRACE_FRAMES = 40


def _short(path: str) -> str:
    """A frame's file as a reader names it: below site-packages, from the package of a known
    project's checkout (`…/verl/verl/trainer/x.py` → `verl/trainer/x.py`), or its last two parts."""
    normal = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in normal:
            return normal.rsplit(marker, 1)[1]
    parts = [p for p in normal.split("/") if p]
    known = [i for i, part in enumerate(parts[:-1]) if part in KNOWN_PACKAGES]
    if known:
        first = known[0]
        while first + 1 < len(parts) - 1 and parts[first + 1] == parts[first]:
            first += 1  # a checkout named like its package
        return "/".join(parts[first:])
    return "/".join(parts[-2:]) if parts else normal


def _where(frame: TraceFrame, short: bool = True) -> str:
    return f"{_short(frame.file) if short else frame.file}:{frame.line} in {frame.function}"


def failure_fields(failure: ParsedFailure, path: str, default_process: str) -> dict[str, Any]:
    """The rule-facing view of one failure (field names in BASE_FACTS["failure"])."""
    innermost = failure.frames[-1] if failure.frames else None
    user = failure.user_frame
    inner_first = list(reversed(failure.frames))[:MAX_TRACE_FRAMES]
    message = cut(failure.message, 500)
    return {
        "kind": failure.kind,
        "type": failure.type,
        "qualname": failure.qualname,
        "wrapper": failure.wrapper,
        "message": message,
        "detail": failure.detail,
        "summary": cut(f"{failure.qualname}: {message} {failure.detail}".strip(), 1600),
        "package": failure.package or None,
        "packages": " ".join(dict.fromkeys(f.package for f in inner_first)),
        "trace": " ".join(f"{_short(f.file)}:{f.function}" for f in inner_first),
        # The source lines closest to the failure: the innermost frames' code, or lines pasted without frames.
        "code": cut(" | ".join([*(f.code for f in inner_first[:3] if f.code), *(t.strip() for _n, t in failure.context_lines)]), 600),
        "frame": _where(innermost) if innermost else None,
        "frame_function": innermost.function if innermost else None,
        "user_frame": _where(user, short=False) if user else None,
        "user_function": user.function if user else None,
        "signal": failure.signal,
        "exit_code": failure.exit_code,
        "process": failure.process or default_process,
        "chain": failure.chain,
        "position": failure.position,
        "root": failure.position == 0,
        "secondary": failure.secondary,
        "ignored": failure.ignored,
        "path": path,
        "line": failure.line,
        "text": cut(failure.text, MAX_TEXT),
    }


def failure_evidence(failure: ParsedFailure, path: str) -> tuple[Cited, ...]:
    """The failure line and what locates it: its message's next lines, the source lines pasted with
    it, and the innermost frame and the innermost frame of the user's own code, with their code."""
    lines: list[tuple[int, str]] = [(failure.line, failure.text), *failure.detail_lines[:2], *failure.context_lines[-2:]]
    for frame in (failure.frames[-1] if failure.frames else None, failure.user_frame):
        if frame is not None:
            lines.append((frame.log_line, frame.log_text))
            if frame.code_line is not None:
                lines.append((frame.code_line, frame.code_text))
    seen: set[int] = set()
    out: list[Cited] = []
    for number, text in lines:
        if number not in seen and len(out) < 8:
            seen.add(number)
            out.append(Cited(path=path, line=number, text=cut(text, MAX_TEXT), signature="failure"))
    return tuple(out)


def failure_facts(scan: FileScan) -> list[BaseFact]:
    """One fact per distinct failure of a file (the same failure printed by several ranks is one fact,
    counted), with whether it ends its exception chain."""
    last_position: dict[int, int] = {}
    for failure in scan.failures:
        last_position[failure.chain] = max(failure.position, last_position.get(failure.chain, 0))
    default_process = process_of(scan.path)
    facts: list[BaseFact] = []
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    processes: dict[tuple[Any, ...], set[str]] = {}
    for failure in scan.failures:
        fields = failure_fields(failure, scan.path, default_process)
        fields["terminal"] = failure.position == last_position[failure.chain]
        key = (fields["kind"], fields["type"], failure_template(fields["message"]), fields["frame_function"], fields["signal"], fields["terminal"])
        known = by_key.get(key)
        if known is not None:
            known["count"] += 1
            processes[key].add(str(fields["process"]))
            known["processes"] = len(processes[key])
            continue
        fields["count"] = 1
        fields["processes"] = 1
        by_key[key] = fields
        processes[key] = {str(fields["process"])}
        facts.append(BaseFact("failure", fields, failure_evidence(failure, scan.path)))
    return facts
