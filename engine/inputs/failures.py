"""Uncaught failures in log text, by their shape alone.

Python tracebacks and exception lines (with `During handling…` / `The above exception…` chains,
`Exception in thread …`, IPython's `Cell In[…]` frames, tracebacks pasted onto one line), C++
`terminate called after throwing…` / `what():`, `Fatal Python error:`, fatal signals and exit codes
as shells, launchers and torchelastic print them. What a failure *means* is the knowledge base's
business: this module only says what failed, where, in which package and in which process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .normalize import COLLECTOR_STAMP, QUOTE_PREFIX, REPEATED, STAMP, decolour
from .stacks import FAULT_FRAME, FAULT_THREAD

# --- what loggers and launchers put in front of each line of a traceback -------------------------

# An exception's name as it starts a message (`torch.OutOfMemoryError`, `RayTaskError(ValueError)`),
# and with its colon: the start of an exception line, for headers taken off only in front of one.
_EXCEPTION_NAME = r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?:\([\w.]+\))?"
_EXCEPTION_START = _EXCEPTION_NAME + "[:：]"

_HEADERS = (
    # Ray's remote-output prefixes, old and new style: `(WorkerDict pid=1, ip=h) `, `[Engine pid=1] `,
    # and vLLM's worker prefixes `(VllmWorker rank=1 pid=4888) `.
    re.compile(r"^[(\[](?P<actor>[A-Za-z_][\w.:<>\-]*)(?: rank=(?P<arank>\d+))?,? pid=(?P<pid>\d+)(?:, ip=[0-9a-fA-F.:]+)?[)\]] ?"),
    re.compile(r"^\((?:raylet|autoscaler|scheduler|gcs_server|dashboard)(?: \+[\dhms.]+)?\) ?"),
    # torchrun / accelerate: `[rank3]: `, `[default0]:`.
    re.compile(r"^\[(?:rank(?P<rank>\d+)|[A-Za-z_]+(?P<local>\d+))\]:\s?"),
    # The same with the rank blanked out by the paste's author: `[rankx]: `, `[rank*]: `.
    re.compile(r"^\[rank[^\]\s\d][^\]\s]{0,7}\]:\s?"),
    # vLLM's logger: `ERROR 06-03 23:13:39 worker_base.py:148] `, `ERROR 12-18 15:51:23 [v1/engine/core.py:710] `.
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./\-]+:\d+\] ?"),
    # glog / abseil / torch C++: `E0418 15:55:06.123456 1234 file.cc:12] `.
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+ [\w./\-]+:\d+\] ?"),
    # Collectors that stamp every line: `kubectl logs --timestamps` (RFC 3339), log exports and
    # `ts`-style wrappers (`2024-05-01 10:00:00,123 `, `[2024-05-01T10:00:00Z] `).
    COLLECTOR_STAMP,  # with the CRI format's stream and tag (`stderr F `)
    re.compile(rf"^(?:\[{STAMP}\]|{STAMP})(?: |\t|$)"),
    # Launchers that label every line with its task: `srun --label` (`3: `), Open MPI
    # `--tag-output` (`[1,3]<stderr>:`), pdsh / the DeepSpeed launcher (`10.0.0.1: `, `node-07: `),
    # docker compose (`trainer-1  | `).
    re.compile(r"^\s{0,4}(?P<task>\d{1,5}): "),
    re.compile(r"^\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>: ?"),
    re.compile(r"^(?P<host>\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z][\w-]*\d): "),
    re.compile(r"^(?P<service>[A-Za-z][\w.-]*-\d+)\s+\| "),
    # A paste quoted in a Markdown reply, or an exception line set in bold (`**RuntimeError: …**`).
    QUOTE_PREFIX,
    re.compile(rf"^\*\*(?={_EXCEPTION_START})"),
    # In front of an exception line only: a label naming the task or node (NeMo-Run's
    # `nemo-run-0/0 `, `worker3 `), and a logger's record of an uncaught exception
    # (`CRITICAL [olmo.util:158, rank=6] Uncaught HfHubHTTPError: …`).
    re.compile(rf"^(?P<label>[A-Za-z][\w.-]*\d(?:/\d+)?) (?={_EXCEPTION_START})"),
    re.compile(rf"^(?:(?:CRITICAL|ERROR|FATAL)\b.{{0,80}}?\s)?(?:Uncaught|Unhandled)(?: exception)?:?\s+(?={_EXCEPTION_START})"),
)
# Headers that start a new log record: a continuation of an exception message never carries one.
_RECORD_START = re.compile(
    r"^(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d|\[?[IWEF]\d{3,4} \d\d:\d\d|\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\s]|\S+\.py:\d+: \w*Warning:)"
)
# NCCL's result line under a DistBackendError: part of its message, not a failure of its own.
# The type given to a traceback cut before its exception line.
CUT_TYPE = "(exception line missing)"
NCCL_RESULT = re.compile(r"^nccl[A-Z]\w*: ")


def strip_headers(raw: str) -> tuple[str, str | None]:
    """The line without colour codes and launcher/logger headers (indentation kept), and the process
    the headers named."""
    text = REPEATED.sub("", decolour(raw.rstrip("\r\n")))
    process: str | None = None
    for _ in range(6):
        for pattern in _HEADERS:
            match = pattern.match(text)
            if match is None:
                continue
            groups = match.groupdict()
            if process is None:
                rank = groups.get("rank") or groups.get("local") or groups.get("arank") or groups.get("mpi")
                if rank:
                    process = f"rank{rank}"
                elif groups.get("pid"):
                    process = f"{groups.get('actor') or 'pid'} pid={groups['pid']}"
                elif groups.get("task"):
                    process = f"task{groups['task']}"
                elif groups.get("host") or groups.get("service") or groups.get("label"):
                    process = groups.get("host") or groups.get("service") or groups.get("label")
            text = text[match.end():]
            break
        else:
            break
    return text, process


# --- shapes ---------------------------------------------------------------------------------------

# Also behind torchrun's `traceback :` label in its ChildFailedError table, which indents the whole
# traceback under it.
TRACEBACK = re.compile(r"^\s*(?:[A-Za-z_]\w*\s+|traceback\s*:\s*)?Traceback \(most recent call last\):?\s*$")
THREAD_HEADER = re.compile(r"^Exception in thread .+?:?\s*$")
# `sys.unraisablehook`: an exception in `__del__` or a callback, printed and ignored.
IGNORED_HEADER = re.compile(r"^Exception ignored in\b")
CHAIN = re.compile(
    r"^\s*(?:(?P<context>During handling of the above exception, another exception occurred)"
    r"|(?P<cause>The above exception was the direct cause of the following exception)):?\s*$"
)
# Pastes sometimes keep a stray quote or backtick in front of `File`.
FRAME = re.compile(r'^\s*["\'`]?File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
IPY_FRAME = re.compile(r"^\s*File (?P<file>[~/.\w][^,]*?):(?P<line>\d+), in (?P<func>[^\s(]+)")
IPY_CELL = re.compile(r"^\s*Cell In ?\[\d+\], line (?P<line>\d+)")
IPY_ARROW = re.compile(r"^\s*-+> ?\d+\s(?P<code>.*)$")
IPY_CONTEXT = re.compile(r"^\s+(?:\d+|\(\.\.\.\))\s")
CARETS = re.compile(r"^\s*[\^~]+\s*$")
# Exception lines typed or pasted through an input method that writes the full-width colon (U+FF1A)
# are read like `RuntimeError: …`.
_TYPE = r"[A-Za-z_]\w*?(?:Error|Exception|Exit|Interrupt|Fault|Failure|TimeoutExpired|TooLarge|Unavailable|NotFound)\w*"
EXCEPTION = re.compile(
    r"^(?P<qual>(?:[A-Za-z_]\w*\.)*(?P<type>" + _TYPE + r"|Exception|StopIteration|StopAsyncIteration))"
    r"(?:\((?P<inner>[A-Za-z_][\w.]*)\))?(?:[:：][ \t]?(?P<message>.*?))?\s*$"
)
# What ends a traceback, in Python's own grammar: `qualified.name` or `qualified.name: message`.
TRACEBACK_END = re.compile(r"^(?P<qual>(?:[A-Za-z_]\w*\.)*(?P<type>[A-Za-z_]\w*))(?:\((?P<inner>[A-Za-z_][\w.]*)\))?(?:[:：][ \t]?(?P<message>.*?))?\s*$")
# An exception line pasted without its traceback, named by its module: `pyarrow.lib.ArrowInvalid: …`.
DOTTED_EXCEPTION = re.compile(r"^(?P<qual>(?:[a-z_]\w*\.)+(?P<type>[A-Z]\w*))(?:\((?P<inner>[A-Za-z_][\w.]*)\))?(?::[ \t]|：[ \t]?)(?P<message>.+?)\s*$")
INLINE_EXCEPTION = re.compile(r"(?<![\w.])" + _EXCEPTION_NAME + ": ")
TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
WHAT = re.compile(r"^\s*what\(\):\s*(?P<message>.*)$")
FATAL_PYTHON = re.compile(r"Fatal Python error: (?P<message>.+)$")

SIGNAL_WORDS = {
    "Killed": "SIGKILL",
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
}
SIGNAL_NUMBERS = {9: "SIGKILL", 11: "SIGSEGV", 6: "SIGABRT", 7: "SIGBUS", 4: "SIGILL", 8: "SIGFPE", 15: "SIGTERM", 2: "SIGINT"}
_WORDS = "|".join(map(re.escape, SIGNAL_WORDS))
# bash: `train.sh: line 3: 41311 Killed  python train.py`, a bare `Segmentation fault (core dumped)`;
# srun: `srun: error: node-1: task 0: Killed`.
SHELL_SIGNAL = re.compile(
    r"^(?P<w1>" + _WORDS + r")(?: \(core dumped\))?\s*$"
    r"|\bline \d+:\s+\d+\s+(?P<w2>" + _WORDS + r")(?: \(core dumped\))?\s+\S"
    r"|\btask \d+:\s+(?P<w3>" + _WORDS + r")(?: \(core dumped\))?\s*$"
)
# zsh: `zsh: killed     python train.py`.
ZSH_SIGNAL = re.compile(r"^zsh: (?P<word>killed|segmentation fault|bus error|abort|illegal hardware instruction)\s+\S")
ZSH_WORDS = {"killed": "SIGKILL", "segmentation fault": "SIGSEGV", "bus error": "SIGBUS", "abort": "SIGABRT", "illegal hardware instruction": "SIGILL"}
EXITCODE = re.compile(r"\bexitcode\s*:?\s*(?P<code>-?\d+)")
SIGNAL_RECEIVED = re.compile(r"\bSignal (?P<num>\d+) \((?P<name>SIG[A-Z]+)\) received by PID (?P<pid>\d+)")
ABSEIL_SIGNAL = re.compile(r"\*\*\* (?P<name>SIG[A-Z]+) received at time=")
CAUGHT_SIGNAL = re.compile(r"Caught signal (?P<num>\d+) \((?P<desc>[^)]+)\)")
EXIT_STATUS = re.compile(
    r"\b(?:exit(?:ed|s)? with (?:exit |return )?(?:code|status)|exit (?:code|status)(?: of)?|returned non-zero exit status)\s*[:=]?\s*(?P<code>-?\d+)",
    re.IGNORECASE,
)
# How exception messages report that a process died of a signal: `killed by signal: Killed`
# (DataLoader), `died with <Signals.SIGKILL: 9>` (multiprocessing), `terminated by signal SIGSEGV`.
KILLED_BY = re.compile(
    r"killed by signal:? (?P<word>[A-Za-z][\w ]*?)\.?(?:\s|$)"
    r"|\b(?:died|terminated|exited|killed|stopped) (?:with|by) (?:signal )?<?(?:Signals\.)?(?P<name>SIG(?:KILL|SEGV|ABRT|BUS|ILL|FPE|TERM))\b"
    r"|\bsignal \d+ \((?P<paren>SIG(?:KILL|SEGV|ABRT|BUS|ILL|FPE|TERM))\)"
)

# Exceptions that report a failure raised in another process or thread: the launcher's view, not the
# cause. They still make the run a crash, but the first failure they wrap is what needs explaining.
SECONDARY_TYPES = frozenset(
    """ChildFailedError ProcessRaisedException ProcessExitedException CalledProcessError SystemExit KeyboardInterrupt
    RayActorError ActorDiedError ActorUnavailableError WorkerCrashedError RaySystemError EngineDeadError
    BrokenProcessPool""".split()
)

# Where frames come from: `…/site-packages/<pkg>/…`, the standard library, or a checkout of a known project.
SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<pkg>[^/\\]+)")
STDLIB = re.compile(r"[/\\]lib[/\\]python\d[\d.]*[/\\](?!(?:site|dist)-packages)|^<frozen |^<string>$")
KNOWN_PACKAGES = frozenset(
    """torch vllm sglang sgl_kernel transformers trl verl openrlhf deepspeed accelerate ray datasets huggingface_hub peft
    flash_attn triton xformers bitsandbytes mamba_ssm causal_conv1d fla liger_kernel apex megatron nemo nemo_rl swift
    llamafactory lm_eval lmms_eval unsloth unsloth_zoo areal realhf prime_rl skyrl skyrl_train torch_memory_saver nixl
    sympy math_verify latex2sympy2 numpy pandas pyarrow jinja2 requests urllib3 httpx httpcore aiohttp openai anthropic
    omegaconf hydra wandb safetensors tokenizers evaluate lightning pytorch_lightning tensorboard grpc fsspec filelock""".split()
)

MAX_CONTINUATION = 6
MAX_FRAMES = 64
MAX_FAILURES = 256


@dataclass
class TraceFrame:
    file: str
    line: int | None
    function: str
    package: str  # `stdlib`, `user`, or the top-level package
    log_line: int
    log_text: str
    code: str = ""
    code_line: int | None = None
    code_text: str = ""


@dataclass
class ParsedFailure:
    kind: str  # exception | cpp | fatal | signal | exit
    type: str  # the exception's own type (a wrapper's wrapped type), or the signal name
    qualname: str  # as printed
    message: str
    line: int  # where the failure line stands in the input
    text: str  # the raw line
    process: str | None = None
    wrapper: str | None = None  # `RayTaskError(OutOfMemoryError)`: RayTaskError
    detail: str = ""  # continuation lines of the message
    detail_lines: list[tuple[int, str]] = field(default_factory=list)
    context_lines: list[tuple[int, str]] = field(default_factory=list)  # source lines pasted without their frames
    frames: list[TraceFrame] = field(default_factory=list)  # outermost first, as tracebacks print them
    chain: int = 0  # which exception chain of the input
    position: int = 0  # index within the chain
    link: str | None = None  # how it follows the previous exception of its chain: context | cause
    signal: str | None = None
    exit_code: int | None = None
    ignored: bool = False  # printed by `Exception ignored in …`: the program went on

    @property
    def secondary(self) -> bool:
        return self.type in SECONDARY_TYPES or (self.wrapper in SECONDARY_TYPES and self.type == self.wrapper) or self.kind == "exit"

    @property
    def package(self) -> str:
        """The innermost third-party package in the frames; else the one the type's module names."""
        for frame in reversed(self.frames):
            if frame.package not in ("stdlib", "user"):
                return frame.package
        head = self.qualname.split(".", 1)[0] if "." in self.qualname else ""
        if head in KNOWN_PACKAGES:
            return head
        return self.frames[-1].package if self.frames else ""

    @property
    def user_frame(self) -> TraceFrame | None:
        return next((f for f in reversed(self.frames) if f.package == "user"), None)


def package_of(path: str) -> str:
    match = SITE.search(path)
    if match:
        return re.split(r"[.\-]", match.group("pkg").lstrip("_"), maxsplit=1)[0] or "user"
    if STDLIB.search(path):
        return "stdlib"
    for part in re.split(r"[/\\]", path)[:-1]:
        if part in KNOWN_PACKAGES:
            return part  # a checkout of a known project: `…/verl/verl/trainer/…`
    return "user"


def signal_of_code(code: int) -> str | None:
    """The signal behind a negative (Python) or 128+N (shell) exit code."""
    if code < 0:
        return SIGNAL_NUMBERS.get(-code)
    if code > 128:
        return SIGNAL_NUMBERS.get(code - 128)
    return None


def _exception(text: str, after_frames: bool = False) -> re.Match[str] | None:
    """The exception line's parts. Outside a traceback only names that read as exceptions count
    (`…Error`, `…Exception`, a dotted `module.CamelCase`); right after a traceback's frames any
    name does (`socket.gaierror`, `filelock._error.Timeout`, `_queue.Empty`)."""
    if not text or text[0].isspace():
        return None
    match = EXCEPTION.match(text)
    if match is None:
        match = (TRACEBACK_END if after_frames else DOTTED_EXCEPTION).match(text)
    if match is None or match.group("type").endswith("Warning"):
        return None
    return match


_FLAT_SPLIT = re.compile(
    r'\s*(?=Traceback \(most recent call last\):)|\s+(?=File "[^"]+", line \d+)'
    r"|\s*(?=During handling of the above exception)|\s*(?=The above exception was the direct cause)"
)
_FLAT_FRAME = re.compile(r'(\s*File "[^"]+", line \d+, in \S+)\s*(.*)$')


def unflatten(text: str) -> list[str] | None:
    """A traceback pasted onto one line, given back its lines (None when the line is not one)."""
    if "Traceback (most recent call last)" not in text or 'File "' not in text:
        return None
    out: list[str] = []
    for part in _FLAT_SPLIT.split(text):
        if not part.strip():
            continue
        frame = _FLAT_FRAME.match(part)
        if frame is None:
            out.append(part.strip())
            continue
        out.append("  " + frame.group(1).strip())
        rest = frame.group(2)
        exc = INLINE_EXCEPTION.search(rest) if rest else None
        if exc is not None:
            if rest[: exc.start()].strip():
                out.append("    " + rest[: exc.start()].strip())
            out.append(rest[exc.start():].strip())
        elif rest.strip():
            out.append("    " + rest.strip())
    return out


@dataclass(frozen=True)
class _Line:
    number: int
    raw: str
    text: str  # headers removed, indentation kept
    process: str | None
    gap: bool = False  # lines were left out before this one (between captured windows)


def parse_failures(lines: Sequence[tuple[int, str]], end: int | None = None) -> list[ParsedFailure]:
    """Every failure in numbered raw lines, ascending, possibly with gaps between captured windows.

    Lines that name their process (`[rank3]:`, Ray's `(Worker pid=…)`) are read as one stream per
    process, so tracebacks that several ranks print at once, interleaved, stay apart. `end` is the
    input's last line number: a traceback still open there was cut before its exception line (a
    paste that stops short), and is reported as such rather than lost.
    """
    streams: dict[str | None, list[_Line]] = {}
    gap_since: dict[str | None, bool] = {}
    previous = None
    for number, raw in lines:
        text, process = strip_headers(raw)
        if previous is not None and number > previous + 1:
            gap_since = dict.fromkeys(streams, True)
        previous = number
        gap = gap_since.get(process, False) and process in streams
        gap_since[process] = False
        stream = streams.setdefault(process, [])
        pieces = unflatten(text)
        if pieces is None:
            stream.append(_Line(number, raw, text, process, gap))
        else:
            stream.extend(_Line(number, raw, piece, process, gap and i == 0) for i, piece in enumerate(pieces))
    failures: list[ParsedFailure] = []
    chains = 0
    # Only the stream that prints the input's last words can have been cut by the input's end.
    last_words = max((number for number, raw in lines if raw.strip()), default=0)
    cut_at = last_words if end is not None and end - last_words <= 2 else None
    for process in sorted(streams, key=lambda p: (p is not None, p or "")):
        found = _Parser(streams[process], cut_at).run()
        for failure in found:
            failure.chain += chains
        chains = max((f.chain for f in failures + found), default=chains)
        failures.extend(found)
    failures.sort(key=lambda f: (f.line, f.chain, f.position))
    return failures[:MAX_FAILURES]


class _Parser:
    """One pass over the lines; a traceback's frames wait for the exception line that ends it."""

    def __init__(self, lines: list[_Line], cut_at: int | None = None) -> None:
        self.lines = lines
        self.cut_at = cut_at  # the input's last non-blank line, when the input ends there
        self.failures: list[ParsedFailure] = []
        self.frames: list[TraceFrame] = []
        self.context: list[tuple[int, str]] = []  # indented source lines seen outside any frame
        self.chain = 0
        self.link: str | None = None
        self.open = False  # inside a traceback
        self.indent = 0  # the open traceback's own indentation (its header's): its exception line has it too
        self.ignored = False
        self.stale = 0

    def run(self) -> list[ParsedFailure]:
        i = 0
        while i < len(self.lines) and len(self.failures) < MAX_FAILURES:
            if self.lines[i].gap:
                self._close()  # a gap between captured windows ends whatever was open
                self.context = []
            i = self._step(i)
        self._cut_at_end()
        return self.failures

    def _cut_at_end(self) -> None:
        """A traceback whose frames run to the end of the input: its exception line was cut off."""
        if self.cut_at is None or not self.open or not self.frames or self.stale or len(self.failures) >= MAX_FAILURES:
            return
        last = next(line for line in reversed(self.lines) if line.raw.strip())
        if last.number != self.cut_at:
            return  # another process printed after it, or a window ended, not the input
        previous = self.failures[-1] if self.failures else None
        if self.link is not None and previous is not None and previous.chain == self.chain:
            return  # the chain's exception was printed; the cut part only re-raises it
        innermost = self.frames[-1]
        self.failures.append(ParsedFailure(
            kind="exception",
            type=CUT_TYPE,
            qualname=CUT_TYPE,
            message="the traceback ends without its exception line (the input was cut)",
            line=innermost.log_line,
            text=innermost.log_text,
            process=last.process,
            frames=list(self.frames),
            chain=self.chain,
            ignored=self.ignored,
        ))

    def _close(self) -> None:
        self.frames, self.open, self.link, self.ignored, self.indent = [], False, None, False, 0

    def _dedented(self, text: str) -> str:
        """The line without the open traceback's own indentation, when it has exactly that much: a
        traceback pasted indented, or printed in torchrun's failure table, ends in an exception line at
        its header's indentation (source lines sit deeper and keep theirs)."""
        indent = self.indent
        if indent and self.open and len(text) > indent and text[:indent].isspace() and not text[indent].isspace():
            return text[indent:]
        return text

    def _start(self, ignored: bool = False, indent: int = 0) -> None:
        if self.link is None:
            self.chain += 1
        self.frames, self.open, self.ignored, self.stale, self.indent = [], True, ignored, 0, indent

    def _step(self, i: int) -> int:
        line = self.lines[i]
        text = line.text
        if TRACEBACK.match(text):
            if not self.ignored or self.frames:
                self._start(self.ignored and not self.frames, indent=len(text) - len(text.lstrip()))
            return i + 1
        if THREAD_HEADER.match(text) or IGNORED_HEADER.match(text):
            self.link = None
            self._start(ignored=bool(IGNORED_HEADER.match(text)))
            return i + 1
        chain = CHAIN.match(text)
        if chain:
            self.link = "cause" if chain.group("cause") else "context"
            self.frames, self.open = [], False
            return i + 1
        frame = FRAME.match(text) or IPY_FRAME.match(text)
        cell = IPY_CELL.match(text) if frame is None else None
        if frame is not None or cell is not None:
            if not self.open:
                self._start(indent=max(0, len(text) - len(text.lstrip()) - 2))  # the header was missed: frames sit 2 deeper
            if frame is not None:
                file = frame.group("file")
                tf = TraceFrame(file, int(frame.group("line")), frame.group("func"), package_of(file), line.number, line.raw)
            else:
                assert cell is not None
                tf = TraceFrame("<cell>", int(cell.group("line")), "<cell>", "user", line.number, line.raw)
            self.frames.append(tf)
            if len(self.frames) > MAX_FRAMES:
                del self.frames[8]  # keep the outermost few and the innermost many
            self.stale = 0
            return self._code(i + 1, tf)
        exc = _exception(self._dedented(text), after_frames=self.open and bool(self.frames))
        if exc is not None and (self.open or exc.group("message") is not None):
            return self._exception(i, exc)
        other = self._other(i)
        if other is not None:
            self.failures.append(other)
            return i + 1
        if text[:1].isspace() and text.strip() and not self.open:
            self.context = (self.context + [(line.number, line.raw)])[-3:]
        elif text.strip():
            self.context = []
        if self.open and text.strip():
            self.stale += 1
            if self.stale > 40:
                self._close()
        return i + 1

    def _code(self, i: int, frame: TraceFrame) -> int:
        """The source lines a traceback prints under a frame (and IPython's context lines)."""
        while i < len(self.lines):
            line = self.lines[i]
            text = line.text
            if not text.strip() or FRAME.match(text) or IPY_FRAME.match(text) or TRACEBACK.match(text) or CHAIN.match(text):
                return i
            arrow = IPY_ARROW.match(text)
            own = self._dedented(text)
            if arrow is None and _exception(own) is not None:
                return i
            if arrow is None and not own[:1].isspace() and (frame.code or self.lines[i - 1].number != frame.log_line):
                return i  # an unindented line ends the source lines, except right after the frame (pastes lose indentation)
            if arrow is not None:
                frame.code, frame.code_line, frame.code_text = arrow.group("code").strip(), line.number, line.raw
            elif not frame.code and not CARETS.match(text) and not IPY_CONTEXT.match(text):
                frame.code, frame.code_line, frame.code_text = text.strip(), line.number, line.raw
            i += 1
        return i

    def _exception(self, i: int, exc: re.Match[str]) -> int:
        line = self.lines[i]
        type_, inner = exc.group("type"), exc.group("inner")
        wrapper = None
        if inner:
            wrapper, type_ = type_, inner.rsplit(".", 1)[-1]
        previous = self.failures[-1] if self.failures else None
        chained = self.link is not None and previous is not None and previous.chain == self.chain
        if not self.open and not chained:
            self.chain += 1
        failure = ParsedFailure(
            kind="exception",
            type=type_,
            qualname=exc.group("qual") + (f"({inner})" if inner else ""),
            message=(exc.group("message") or "").strip(),
            line=line.number,
            text=line.raw,
            process=line.process,
            wrapper=wrapper,
            frames=list(self.frames),
            chain=self.chain,
            position=previous.position + 1 if chained and previous is not None else 0,
            link=self.link if chained else None,
            ignored=self.ignored,
            context_lines=[] if self.frames else list(self.context),
        )
        i += 1
        while i < len(self.lines) and len(failure.detail_lines) < MAX_CONTINUATION:
            nxt = self.lines[i]
            t = nxt.text
            if nxt.gap or nxt.process != line.process:
                break
            if not t.strip() or TRACEBACK.match(t) or CHAIN.match(t) or FRAME.match(t) or WHAT.match(t):
                break
            if _exception(t) and not NCCL_RESULT.match(t):
                break  # another exception; NCCL's `ncclInternalError: …` line explains this one
            if THREAD_HEADER.match(t) or IGNORED_HEADER.match(t) or _RECORD_START.match(nxt.raw) or _RECORD_START.match(t) or "%|" in t:
                break  # the next log record
            failure.detail_lines.append((nxt.number, nxt.raw))
            i += 1
        failure.detail = " ".join(strip_headers(raw)[0].strip() for _n, raw in failure.detail_lines)[:1000]
        _signal_fields(failure, f"{failure.message} {failure.detail}")
        self.failures.append(failure)
        self.frames, self.open, self.link, self.ignored, self.context, self.indent = [], False, None, False, [], 0
        return i

    def _other(self, i: int) -> ParsedFailure | None:
        """C++ terminations, fatal Python errors, signals and exit codes."""
        line = self.lines[i]
        text = line.text.strip()

        def make(kind: str, type_: str, message: str, signal: str | None = None, code: int | None = None) -> ParsedFailure:
            return ParsedFailure(kind, type_, type_, message, line.number, line.raw, line.process, signal=signal, exit_code=code)

        match = TERMINATE.search(text)
        if match:
            what = ""
            for j in range(i + 1, min(i + 4, len(self.lines))):
                found = WHAT.match(self.lines[j].text)
                if found:
                    what = found.group("message").strip()
                    break
            failure = make("cpp", match.group("type").rsplit("::", 1)[-1], what)
            failure.qualname = match.group("type")
            return failure
        match = FATAL_PYTHON.search(text)
        if match:
            message = match.group("message").strip()
            failure = make("fatal", "FatalPythonError", message, SIGNAL_WORDS.get(message.split(":")[0].strip()) or _signal_word(message))
            failure.frames = self._crash_stack(i + 1, line.process)
            return failure
        match = SIGNAL_RECEIVED.search(text)
        if match:
            return make("signal", match.group("name"), text, match.group("name"))
        match = ABSEIL_SIGNAL.search(text) or CAUGHT_SIGNAL.search(text)
        if match:
            name = match.groupdict().get("name") or SIGNAL_NUMBERS.get(int(match.group("num")), f"signal {match.group('num')}")
            return make("signal", name, text, name)
        match = EXITCODE.search(text)
        if match:
            code = int(match.group("code"))
            signal = signal_of_code(code)
            return make("signal" if signal else "exit", signal or f"exit {code}", text, signal, code) if code else None
        match = SHELL_SIGNAL.search(text)
        if match and len(text) < 300:
            name = SIGNAL_WORDS[match.group("w1") or match.group("w2") or match.group("w3")]
            return make("signal", name, text, name)
        match = ZSH_SIGNAL.match(text)
        if match:
            name = ZSH_WORDS[match.group("word")]
            return make("signal", name, text, name)
        match = EXIT_STATUS.search(text)
        if match and len(text) < 400:
            code = int(match.group("code"))
            signal = signal_of_code(code)
            return make("signal" if signal else "exit", signal or f"exit {code}", text, signal, code) if code else None
        return None


    def _crash_stack(self, i: int, process: str | None) -> list[TraceFrame]:
        """The crashing thread's frames that faulthandler prints after `Fatal Python error:` (most
        recent call first; the crashing one is `Current thread …`), outermost first like a
        traceback's."""
        blocks: list[tuple[bool, list[TraceFrame]]] = []
        preamble = 0
        for line in self.lines[i : i + 4 * MAX_FRAMES]:
            if line.process != process:
                continue
            header = FAULT_THREAD.match(line.text)
            if header is not None:
                blocks.append((header.group("current") == "Current thread", []))
                continue
            frame = FAULT_FRAME.match(line.text)
            if frame is not None and blocks:
                file = frame.group("file")
                blocks[-1][1].append(TraceFrame(file, int(frame.group("line")), frame.group("func"), package_of(file), line.number, line.raw))
            elif line.text.strip() and not blocks:
                preamble += 1  # faulthandler may print a line or two first (`Extension modules: …`)
                if preamble > 3:
                    break
            elif line.text.strip():
                break
        chosen = next((frames for current, frames in blocks if current), blocks[0][1] if blocks else [])
        return chosen[::-1]


def _signal_word(text: str) -> str | None:
    return next((name for word, name in SIGNAL_WORDS.items() if word in text), None)


def _signal_fields(failure: ParsedFailure, text: str) -> None:
    """A signal or exit code an exception message reports (`killed by signal: Killed`, `exit status 255`)."""
    match = KILLED_BY.search(text)
    if match:
        failure.signal = match.group("name") or match.group("paren") or _signal_word(match.group("word") or "") or SIGNAL_WORDS.get(match.group("word") or "")
        if failure.signal is None and (match.group("word") or "").startswith("Bus"):
            failure.signal = "SIGBUS"
    exit_match = EXIT_STATUS.search(text)
    if exit_match:
        failure.exit_code = int(exit_match.group("code"))
        failure.signal = failure.signal or signal_of_code(failure.exit_code)
