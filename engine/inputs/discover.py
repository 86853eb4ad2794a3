"""Finding the inputs of a run (files, folders, archives, stdin) and telling what each one is."""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple, cast

from ..base.errors import InputError
from ..base.vocabulary import InputKind
from . import archives
from .containerlogs import JsonFileDecoder, is_json_file_log
from .filetypes import CONFIG_SUFFIXES, LOG_SUFFIXES, RAY_WORKER_SUFFIXES, is_archive_candidate
from .filetypes import suffix as name_suffix
from .pastes import IndentStripper, pasted_indent
from .walk import folders

SNIFF_BYTES = 8192
MAX_PARSED_FILE = 16 * 1024 * 1024  # configs and environment reports are read whole
# UTF-8 is checked a slice of a read at a time. A read decoded whole makes a str of up to four
# times its size, made and dropped per read: glibc's malloc then raises its mmap threshold above
# that size and serves it from a heap that grows with the file (90 MB peak RSS at 1 GB, 111 at 2 GB).
UTF8_SLICE = 16 << 10

_PIP_LINE = re.compile(rb"^[A-Za-z0-9][A-Za-z0-9_.\-]*(?:\[[^\]]*\])?\s*(?:==|===|@)\s*\S+\s*$")
_ENV_LINE = re.compile(rb"^(?:export\s+)?[A-Z_][A-Z0-9_]*=")
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_\-.]?\d+", re.IGNORECASE)


Opener = Callable[["Source"], BinaryIO]


@dataclass(frozen=True, slots=True)
class Source:
    """One input: a display name for citations and a way to open its bytes.

    `order` places it among the others (see `sort_key`); members of one archive share its first
    element so they are read one after the other, in archive order.
    """

    display: str
    # Makes the source's reader; one object serves every plain file of a discovery (a folder may
    # hold 100,000 of them), an archive's members and standard input have their own.
    opener: Opener
    name: str  # the file name its kind is told by; empty: the last part of `display`
    order: tuple[str, ...] = ()
    size: int | None = None  # a plain file's size when it was found: it is read no further

    def open(self) -> BinaryIO:
        return self.opener(self)

    @property
    def filename(self) -> str:
        return self.name or os.path.basename(self.display)


@dataclass(frozen=True)
class Warning:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def sort_key(source: Source) -> tuple[str, ...]:
    """Inputs are read in this order, whatever order they were given in, so output is deterministic.

    Archive members keep their archive order, so one sequential reader serves them all.
    """
    return source.order or (source.display, "")


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str:
    kind = next((text for test, text in _KINDS if test(mode)), "not a regular file")
    return f"skipped: {kind}" if kind == "not a regular file" else f"skipped: {kind}, not a regular file"


class _Stat(NamedTuple):
    """What is used of a file's stat: an os.stat_result holds some twenty numbers, times 100,000 files."""

    st_mode: int
    st_size: int


def _walk(root: str, warnings: list[Warning]) -> Iterator[tuple[str, _Stat | None]]:
    """Files under `root` with their stat when it came for free; never opens or follows anything.
    Yielded one by one: a folder of 100,000 files would otherwise hold all their stats at once."""

    def on_error(path: str, exc: OSError, listing: bool) -> None:
        warnings.append(Warning(path, f"{'cannot read folder' if listing else 'skipped'}: {exc.strerror or exc}"))

    for folder in folders(root, on_error):
        for entry in folder.files:
            try:
                if entry.is_symlink():
                    # os.path.isdir, unlike DirEntry.is_dir, treats a link loop as "not a folder".
                    if os.path.isdir(entry.path):
                        warnings.append(Warning(entry.path, "symbolic link to a folder not followed"))
                        continue
                    yield entry.path, None  # its target is looked at by _file_sources
                    continue
                # FIFOs and devices too: _file_sources tells what they are, once, without opening them.
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                warnings.append(Warning(entry.path, f"skipped: {exc.strerror or exc}"))
                continue
            yield entry.path, _Stat(info.st_mode, info.st_size)

def discover(paths: Iterable[str], warnings: list[Warning], stdin: BinaryIO | None = None) -> list[Source]:
    """Expand files, folders, archives and `-` into sources, in a deterministic order.

    A path that does not exist is an InputError; anything unreadable is a warning. Nothing that is
    not a regular file is ever opened (opening a FIFO blocks).
    """
    sources: list[Source] = []
    seen: set[str] = set()
    ctx = archives.Context(warn=lambda path, message: warnings.append(Warning(path, message)))
    cache = [archives.CACHE_LIMIT]
    files = _PlainFiles(warnings)
    for given in paths:
        if given == "-":
            sources.append(_stdin_source(stdin or sys.stdin.buffer, warnings))
            continue
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            raise InputError(f"{given}: no such file or folder")
        is_dir = path.is_dir()
        candidates: Iterable[tuple[str, _Stat | None]] = _walk(str(path), warnings) if is_dir else [(str(path), None)]
        found = False
        for display, info in candidates:
            found = True
            if display in seen:
                continue
            seen.add(display)
            sources.extend(_file_sources(display, info, warnings, ctx, cache, files))
        if is_dir and not found:
            warnings.append(Warning(given, "folder holds no files"))
    if ctx.zstd_skipped:
        more = f" and {len(ctx.zstd_skipped) - 5} more" if len(ctx.zstd_skipped) > 5 else ""
        warnings.append(Warning(ctx.zstd_skipped[0], f"zstandard not installed; skipped {', '.join(ctx.zstd_skipped[:5])}{more}"))
    return sources


def _file_sources(
    display: str, info: os.stat_result | _Stat | None, warnings: list[Warning], ctx: archives.Context, cache: list[int], files: _PlainFiles
) -> list[Source]:
    # Plain strings, not Path objects: this runs once per file, for folders of 100,000 files.
    if info is None:
        try:
            info = os.stat(display)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                reason = "symbolic link loop"
            elif os.path.islink(display):
                reason = "broken symbolic link"
            else:
                reason = exc.strerror or str(exc)
            warnings.append(Warning(display, f"skipped: {reason}"))
            return []
    if not stat.S_ISREG(info.st_mode):
        warnings.append(Warning(display, _not_regular(info.st_mode)))
        return []
    if not os.access(display, os.R_OK):
        warnings.append(Warning(display, "skipped: permission denied"))
        return []
    name = os.path.basename(display)
    if is_archive_candidate(name):
        path = Path(display)
        try:
            members = archives.list_members(path, display, ctx, cache)
        except OSError as exc:
            warnings.append(Warning(display, f"skipped: {exc.strerror or exc}"))
            return []
        if members is not None:
            return _member_sources(path, display, members, warnings)
    size = info.st_size
    # The name is left to be worked out from the display name when needed: one string less per file.
    return [Source(display, files, "", size=size)]


class _PlainFiles:
    """Opens the plain files of one discovery, each read up to the size it had when found."""

    __slots__ = ("warnings",)

    def __init__(self, warnings: list[Warning]) -> None:
        self.warnings = warnings

    def __call__(self, source: Source) -> BinaryIO:
        return cast(BinaryIO, Checked(open(source.display, "rb"), source.display, self.warnings, source.size))


STDIN_LIMIT = archives.TOTAL_LIMIT  # bytes read from stdin, the same bound as decompressed archives


def _stdin_source(stdin: BinaryIO, warnings: list[Warning]) -> Source:
    """Standard input copied, a block at a time, to an unnamed temporary file: memory stays flat
    however much is piped in, and the input can be read again (stack dumps are re-read)."""
    spool = tempfile.TemporaryFile()
    copied = 0
    while copied < STDIN_LIMIT:
        block = stdin.read(min(archives.COPY, STDIN_LIMIT - copied))
        if not block:
            break
        spool.write(block)
        copied += len(block)
    else:
        if stdin.read(1):
            warnings.append(Warning("<stdin>", f"more than {STDIN_LIMIT >> 30} GiB on standard input; read the first {STDIN_LIMIT >> 30} GiB"))
    spool.flush()
    fd = spool.fileno()
    return Source("<stdin>", _opener(lambda _source: Checked(cast(BinaryIO, _Pread(spool, fd, copied)), "<stdin>", warnings)), "stdin")


class _Pread(archives.Reader):
    """A reader of its own over a shared file, at its own position (the file stays open while the
    source lives)."""

    def __init__(self, owner: object, fd: int, size: int) -> None:
        self._owner = owner  # keeps the temporary file open
        self._fd = fd
        self._size = size
        self._at = 0

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        want = self._size - self._at if size is None or size < 0 else min(size, self._size - self._at)
        if want <= 0:
            return b""
        data = os.pread(self._fd, want, self._at)
        self._at += len(data)
        return data


def _opener(make: Callable[[Source], io.IOBase]) -> Opener:
    # Our readers are io.RawIOBase, which typing does not count as BinaryIO.
    return cast(Opener, make)


def _member_sources(path: Path, display: str, members: list[archives.Member], warnings: list[Warning]) -> list[Source]:
    shared = archives.SharedArchive(path, display, members)
    return [
        Source(
            m.display,
            _opener(lambda _source, m=m: Checked(shared.open(m.index), m.display, warnings)),  # type: ignore[misc]
            m.name,
            order=(display, f"{m.index:010d}"),
        )
        for m in members
    ]


class Checked(archives.Reader):
    """What an input's bytes turn out to be while they are read, told once per input.

    - a file read up to its size when it was found: one that keeps growing cannot stall a
      diagnosis, and one that shrinks under us is reported;
    - invalid UTF-8 (the scanner replaces it, so matching goes on, but evidence may show U+FFFD);
    - bare carriage returns as the only line ends, read as line breaks so line numbers mean
      something and a whole log is not one 'line';
    - UTF-16 text (a byte-order mark, or NULs in every other byte of plain text), decoded and
      handed on as UTF-8 instead of being skipped as binary;
    - Docker's json-file log, handed on as the text of its records (inputs/containerlogs.py);
    - a log pasted as an indented block, handed on without the indentation (inputs/pastes.py).
    Warnings are told on close, and not for binary content, which the pipeline already skips.
    """

    def __init__(self, raw: BinaryIO, display: str, warnings: list[Warning], size: int | None = None) -> None:
        self._raw = raw
        self._display = display
        self._warnings = warnings
        self._size = size
        self._left = size if size is not None else -1
        self._read = 0
        self._reads = 0
        self._head = b""
        self._decoder: codecs.IncrementalDecoder | None = codecs.getincrementaldecoder("utf-8")("strict")
        self._bad_utf8: int | None = None
        self._bare_cr: bool | None = None
        self._eof = False
        self._utf16: codecs.IncrementalDecoder | None = None
        self._decoded = 0  # bytes handed on (after UTF-16 decoding)
        self._json: JsonFileDecoder | None = None
        self._indent: IndentStripper | None = None
        self._indent_looked = False

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        self._reads += 1
        while True:
            data = self._read_raw(size)
            if self._reads == 1 and self._read == len(data):
                encoding = _utf16(data)
                if encoding is not None:
                    self._utf16 = codecs.getincrementaldecoder(encoding)("replace")
            if self._reads == 1 and self._read == len(data) and is_json_file_log(data):
                self._json = JsonFileDecoder()
            if self._utf16 is not None:
                # Transcoded; an odd byte at the end of a read waits for the next one.
                text = self._utf16.decode(data, final=not data)
                if not text and data:
                    continue
                data = text.encode("utf-8")
            if self._json is not None:
                # A record cut by the read waits for the next one; an empty result is not the end.
                decoded = self._json.decode(data, final=not data)
                if not decoded and data:
                    continue
                data = decoded
            if not self._indent_looked and data:
                self._indent_looked = True
                indent = pasted_indent(data, whole=self._size is not None and self._left <= 0)
                if indent is not None:
                    self._indent = IndentStripper(indent)
            if self._indent is not None:
                # Held back: what may be the indentation of a line the next read goes on with.
                stripped = self._indent.strip(data, final=not data)
                if not stripped and data:
                    continue
                data = stripped
            break
        return self._look(data) if data else data

    def _read_raw(self, size: int | None) -> bytes:
        if self._size is not None:
            if self._left <= 0:
                self._eof = True
                return b""
            size = self._left if size is None or size < 0 else min(size, self._left)
        data = self._raw.read(-1 if size is None else size)
        if not data:
            self._eof = True
            return data
        if self._size is not None:
            self._left -= len(data)
        self._read += len(data)
        return data

    def _look(self, data: bytes) -> bytes:
        if len(self._head) < SNIFF_BYTES:
            self._head += data[: SNIFF_BYTES - len(self._head)]
        if self._decoder is not None:
            view = memoryview(data)
            for start in range(0, len(data), UTF8_SLICE):
                # The error's offset counts from the bytes the decoder held back from the last read.
                pending = len(self._decoder.getstate()[0])
                try:
                    self._decoder.decode(view[start : start + UTF8_SLICE])
                except UnicodeDecodeError as exc:
                    self._bad_utf8 = self._decoded + start - pending + exc.start
                    self._decoder = None
                    break
        self._decoded += len(data)
        if self._bare_cr is None:
            self._bare_cr = b"\n" not in data and b"\r" in data
        if self._bare_cr:
            data = data.replace(b"\r", b"\n")
        return data

    def _notes(self) -> list[str]:
        notes: list[str] = []
        if self._reads < 2 or looks_binary(self._head):
            return notes  # only sniffed, or binary: the pipeline says what it did
        if self._size is not None and self._eof:
            if self._read < self._size:
                notes.append(f"file shrank while being read: {self._read} of {self._size} bytes read")
            elif self._left <= 0:
                try:
                    now = os.fstat(self._raw.fileno()).st_size
                except (OSError, ValueError, io.UnsupportedOperation):
                    now = self._size
                if now > self._size:
                    notes.append(f"file grew while being read; read the first {self._size} bytes")
        if self._utf16 is not None:
            notes.append("encoded in UTF-16; decoded and read as text")
        if self._json is not None:
            skipped = f" ({self._json.undecodable} lines were not records and were read as they are)" if self._json.undecodable else ""
            notes.append(f"Docker json-file log; read as the text of its records{skipped}")
        if self._indent is not None and self._indent.stripped:
            shown = self._indent.indent.decode("ascii").replace("\t", "\\t")
            notes.append(f"every line is indented by {shown!r}, as in a pasted block; read without it ({self._indent.stripped} lines)")
        if self._bad_utf8 is not None:
            notes.append(f"not valid UTF-8 (first bad byte at offset {self._bad_utf8}); undecodable bytes read as U+FFFD")
        if self._bare_cr:
            notes.append("lines end in bare carriage returns (\\r); read them as line breaks")
        return notes

    def close(self) -> None:
        if not self.closed:
            for note in self._notes():
                self._warnings.append(Warning(self._display, note))
            self._raw.close()
        super().close()


def _utf16(head: bytes) -> str | None:
    """The UTF-16 codec a file's first bytes show: a byte-order mark, or text whose every other
    byte is NUL (UTF-16 without a mark)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) and not head.startswith(b"\xff\xfe\x00\x00"):
        return "utf-16"
    sample = head[:512]
    if len(sample) >= 16 and len(sample) % 2 == 0:
        even, odd = sample[0::2], sample[1::2]
        if odd.count(0) == len(odd) and even.count(0) == 0:
            return "utf-16-le"
        if even.count(0) == len(even) and odd.count(0) == 0:
            return "utf-16-be"
    return None


def classify(source: Source, head: bytes) -> InputKind:
    """The kind of an input, from its name first and its first bytes second."""
    name = source.filename.lower()
    suffix = name_suffix(name)
    text = head.decode("utf-8", "replace")
    if "most recent call first)" in text and ("Thread 0x" in text or "Stack (most recent" in text) or (
        re.search(r"^Process \d+: ", text, re.M) and "Python v" in text
    ):
        return InputKind.stack_dump
    if "collect_env" in name or "Collecting environment information" in text or re.search(r"^PyTorch version: ", text, re.M):
        return InputKind.env_report
    lines = [line for line in head.splitlines()[:50] if line.strip() and not line.startswith(b"#")]
    if lines and sum(1 for line in lines if _PIP_LINE.match(line)) >= max(2, int(len(lines) * 0.6)):
        return InputKind.env_report
    # `env` / `printenv` output, and nvidia-smi's table: facts about the environment, not a log.
    if lines and sum(1 for line in lines if _ENV_LINE.match(line)) >= max(3, int(len(lines) * 0.8)):
        return InputKind.env_report
    if "NVIDIA-SMI " in text and "Driver Version:" in text and not re.search(r"Traceback|Error", text):
        return InputKind.env_report
    if suffix in CONFIG_SUFFIXES and not re.search(r"^\S*(?:INFO|WARNING|ERROR)\b", text, re.M):
        return InputKind.config
    if suffix in RAY_WORKER_SUFFIXES and "worker" in name:
        return InputKind(RAY_WORKER_SUFFIXES[suffix])
    if _RANK_NAME.search(name):
        return InputKind.rank_log
    if suffix in (*LOG_SUFFIXES, "") or name == "stdin":
        return InputKind.driver_log
    return InputKind.other


# Control bytes that text does not hold (tab, line breaks, form feed and escape are text); counted by
# deleting every other byte, in C: a folder of 100,000 files sniffs as many heads.
_CONTROL = bytes(b for b in range(256) if b < 9 or 13 < b < 32 and b != 27)
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)


def looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    if not head:
        return False
    return len(head.translate(None, _NOT_CONTROL)) > len(head) * 0.1
