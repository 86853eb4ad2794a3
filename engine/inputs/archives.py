"""Reading logs inside archives and compressed files as streams, without extracting anything.

A run's logs often arrive as `run.tar.zst` or a zip of zips. Members are never written to disk and
their names are never used as paths: `../../etc/passwd` inside a tar is only display text.

Listing an archive needs one pass over it (a compressed tar has no index); reading needs another.
The members of one archive share a sequential reader, so reading them in archive order
decompresses the archive once more, not once per member. Small members are kept from the listing
pass, so most archives of logs are decompressed only once.

Work is bounded while streaming: a total of decompressed bytes and an expansion ratio (against
decompression bombs) that every member of every archive counts against (a plain tar's members, and
a GNU sparse member claiming a terabyte of holes, included), a nesting depth, a number of members,
and a size limit for zips nested in other archives (zip needs random access, so a nested zip is
copied to a temporary file, never held in memory).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import posixpath
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from ..base.text import printable
from .filetypes import inner_name

MAX_DEPTH = 8  # containers inside the top-level file; deeper ones are skipped with one warning
TOTAL_LIMIT = 20 << 30  # decompressed bytes for all archives of one run
RATIO_LIMIT = 200
RATIO_AFTER = 64 << 20  # small files legitimately compress very well; bombs only show at scale
NESTED_ZIP_LIMIT = 256 << 20
CACHE_LIMIT = 16 << 20  # member bytes kept in memory from the listing pass
MAX_MEMBERS = 10_000  # files read from one top-level archive (nested ones included)
MAX_ZIP_ENTRIES = 100_000  # a zip declaring more is not opened: its directory alone would fill memory
COPY = 1 << 20
PEEK = 512  # the tar magic sits at offset 257


class ArchiveError(Exception):
    """A reason to stop reading an archive, already phrased for a warning."""


def _zstd_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


# Everything a damaged or hostile archive can raise from the standard library's readers; none of
# them may crash a diagnosis.
READ_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    ValueError,
    zlib.error,
    lzma.LZMAError,
    tarfile.TarError,
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    KeyError,
    ArchiveError,
    *_zstd_errors(),
)


def sniff(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gz"
    if head.startswith(b"BZh") and head[3:4].isdigit():
        return "bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zst"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    return None


def member_display(name: str) -> str:
    # Control characters would let a member name forge extra lines in a report; `./` is noise that
    # tar adds. Anything else, `../` and absolute names included, is shown as it is.
    while name.startswith("./"):
        name = name[2:]
    return printable(name)


class Reader(io.RawIOBase):
    """A minimal readable stream: subclasses implement `read`."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Prefixed(Reader):
    """Bytes already peeked at, then the rest of the stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        if self._head:
            if size is None or size < 0 or size >= len(self._head):
                out, self._head = self._head, b""
                return out
            out, self._head = self._head[:size], self._head[size:]
            return out
        return self._rest.read(-1 if size is None else size)


def _read_at_least(stream: BinaryIO, size: int) -> bytes:
    # Decompressors may return short reads; the tar magic needs 262 bytes.
    parts: list[bytes] = []
    have = 0
    while have < size:
        data = stream.read(size - have)
        if not data:
            break
        parts.append(data)
        have += len(data)
    return b"".join(parts)


class _Counting(Reader):
    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.count = 0

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        data = self._raw.read(-1 if size is None else size)
        self.count += len(data)
        return data


@dataclass
class Budget:
    limit: int = field(default_factory=lambda: TOTAL_LIMIT)
    used: int = 0


class _Guard(Reader):
    """Counts what a decompressor produces and stops a bomb while it is still small."""

    def __init__(self, inner: BinaryIO, consumed: Callable[[], int], budget: Budget | None) -> None:
        # Without a budget only the ratio is watched: the bytes were counted where they were decompressed.
        self._inner = inner
        self._consumed = consumed
        self._budget = budget
        self._produced = 0

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        size = COPY if size is None or size < 0 else min(size, COPY)
        data = self._inner.read(size)
        self._produced += len(data)
        if self._budget is not None:
            self._budget.used += len(data)
        if self._budget is not None and self._budget.used > self._budget.limit:
            raise ArchiveError(f"decompression stopped: more than {_size(self._budget.limit)} decompressed in total")
        if self._produced > RATIO_AFTER and self._produced > RATIO_LIMIT * max(1, self._consumed()):
            raise ArchiveError(
                # The threshold, not the exact count: how far past it a read lands depends on the
                # decompressor's buffering, which differs between Python releases.
                f"decompression stopped past {_size(RATIO_AFTER)}: expands more than {RATIO_LIMIT}x (decompression bomb?)"
            )
        return data


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.0f} {unit}"
    return f"{n} bytes"


@dataclass
class Context:
    """State of one pass over archives: the budget, and where warnings go (muted on re-reads)."""

    warn: Callable[[str, str], None]
    budget: Budget = field(default_factory=Budget)
    where: str = ""
    depth_warned: bool = False
    member_failed: bool = False  # a warning was given for a member of the archive being listed
    zstd_skipped: list[str] = field(default_factory=list)


Leaf = tuple[str, str, BinaryIO]  # display, name for classification, stream of its bytes


def _decompress(fmt: str, stream: BinaryIO, display: str, ctx: Context) -> BinaryIO | None:
    counting = _Counting(stream)
    source = cast(BinaryIO, counting)
    inner: Any
    if fmt == "gz":
        inner = gzip.GzipFile(fileobj=source, mode="rb")
    elif fmt == "bz2":
        inner = bz2.BZ2File(source)
    elif fmt == "xz":
        inner = lzma.LZMAFile(source)
    else:
        try:
            import zstandard  # imported lazily: an optional dependency for one format
        except ImportError:
            ctx.zstd_skipped.append(display)
            return None
        inner = _ZstdReader(source, zstandard.ZstdDecompressor())
    return cast(BinaryIO, _Guard(inner, lambda: counting.count, ctx.budget))


class _ZstdReader(Reader):
    """zstd frames one after the other, failing on a truncated frame.

    zstandard's stream_reader ends silently on a cut-off frame and its decompressobj has no output
    limit, so input is fed in small slices: even an all-RLE slice expands to a bounded size
    (about 128 KiB per 4 input bytes), which the guard above then counts.
    """

    SLICE = 1024
    RAW = 64 << 10

    def __init__(self, raw: BinaryIO, decompressor: Any) -> None:
        self._raw = raw
        self._decompressor = decompressor
        self._frame = decompressor.decompressobj()
        self._in_frame = False
        self._input = b""
        self._at = 0
        self._output = b""
        self._out_at = 0
        self._done = False

    def _fill(self) -> None:
        while self._out_at >= len(self._output) and not self._done:
            if self._at >= len(self._input):
                self._input, self._at = self._raw.read(self.RAW), 0
                if not self._input:
                    if self._in_frame:
                        raise EOFError("zstd data ended before the end of its frame")
                    self._done = True
                    return
            piece = self._input[self._at : self._at + self.SLICE]
            self._at += len(piece)
            self._output, self._out_at = self._frame.decompress(piece), 0
            self._in_frame = not self._frame.eof
            if self._frame.eof:
                # The next frame starts in what this one did not use.
                self._input, self._at = self._frame.unused_data + self._input[self._at :], 0
                self._frame = self._decompressor.decompressobj()

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        size = COPY if size is None or size < 0 else size
        self._fill()
        out = self._output[self._out_at : self._out_at + size]
        self._out_at += len(out)
        return out


def walk(stream: BinaryIO, display: str, name: str, depth: int, ctx: Context, seekable: bool = False) -> Iterator[Leaf]:
    """Every plain file in `stream`, in stream order, recursing into archives and compression.

    Each leaf's stream is only valid until the next item is asked for.
    """
    if seekable:
        head = _read_at_least(stream, PEEK)
        stream.seek(0)
        rejoined: BinaryIO = stream
    else:
        head = _read_at_least(stream, PEEK)
        rejoined = _Prefixed(head, stream)  # type: ignore[assignment]
    fmt = sniff(head)
    if fmt is None:
        ctx.where = display
        yield display, name, rejoined
        return
    if depth > MAX_DEPTH:
        if not ctx.depth_warned:
            ctx.warn(display, f"archives nested more than {MAX_DEPTH} deep; inner archive not read")
            ctx.depth_warned = True
        return
    ctx.where = display
    if fmt == "tar":
        yield from _tar(rejoined, display, depth, ctx, counted=False)
        return
    if fmt == "zip":
        yield from _zip(rejoined, display, depth, ctx, seekable)
        return
    inner = _decompress(fmt, rejoined, display, ctx)
    if inner is None:
        return
    inner_head = _read_at_least(inner, PEEK)
    inner_stream: BinaryIO = _Prefixed(inner_head, inner)  # type: ignore[assignment]
    inner_fmt = sniff(inner_head)
    if inner_fmt == "tar":
        yield from _tar(inner_stream, display, depth, ctx, counted=True)
    elif inner_fmt is not None:
        yield from walk(inner_stream, display, inner_name(name), depth + 1, ctx)
    else:
        ctx.where = display
        yield display, inner_name(name), inner_stream


def _nested(stream: BinaryIO, display: str, shown: str, depth: int, ctx: Context) -> Iterator[Leaf]:
    """A member, which may itself be an archive; its own damage does not end the outer one."""
    try:
        yield from walk(stream, display, posixpath.basename(shown.rstrip("/")), depth + 1, ctx)
    except READ_ERRORS as exc:
        # If the outer stream is what broke, the outer loop fails next; list_members then stays
        # quiet, as this warning already told the problem.
        ctx.warn(ctx.where or display, f"{describe(exc)}; diagnosed what could be read")
        ctx.member_failed = True


def _tar(stream: BinaryIO, display: str, depth: int, ctx: Context, counted: bool) -> Iterator[Leaf]:
    """A tar's members, each guarded: counted against the total (unless `counted`, when the
    decompressor feeding the tar already counts them) and against the expansion ratio, measured
    against the tar bytes the member took (a sparse member is mostly holes read as zeros)."""
    ctx.where = display
    counting = _Counting(stream)
    archive = tarfile.open(fileobj=cast(BinaryIO, counting), mode="r|")
    while True:
        info = archive.next()
        if info is None:
            break
        archive.members.clear()  # type: ignore[attr-defined]  # a streamed tar keeps every header it read otherwise
        ctx.where = display
        if not info.isreg():
            continue  # links, devices and folders carry no log text
        member = archive.extractfile(info)
        if member is None:
            continue
        start = counting.count
        guarded = _Guard(cast(BinaryIO, member), lambda start=start: counting.count - start, None if counted else ctx.budget)  # type: ignore[misc]
        shown = member_display(info.name)
        yield from _nested(cast(BinaryIO, guarded), f"{display}!{shown}", shown, depth, ctx)
        ctx.where = display


def _spool(stream: BinaryIO, limit: int) -> BinaryIO | None:
    """A stream copied to a temporary file (deleted when closed); None when it exceeds `limit`."""
    spool = tempfile.TemporaryFile()
    copied = 0
    while True:
        block = stream.read(COPY)
        if not block:
            break
        copied += len(block)
        if copied > limit:
            spool.close()
            return None
        spool.write(block)
    spool.seek(0)
    return cast(BinaryIO, spool)


def _zip(stream: BinaryIO, display: str, depth: int, ctx: Context, seekable: bool) -> Iterator[Leaf]:
    ctx.where = display
    spooled: BinaryIO | None = None
    if not seekable:
        spooled = _spool(stream, NESTED_ZIP_LIMIT)
        if spooled is None:
            ctx.warn(display, f"zip inside an archive is larger than {_size(NESTED_ZIP_LIMIT)}; not read")
            return
        stream = spooled
    try:
        entries = _zip_entries(stream)
        if entries > MAX_ZIP_ENTRIES:
            ctx.warn(display, f"zip declares {entries} entries, more than {MAX_ZIP_ENTRIES}; not read")
            return
        with zipfile.ZipFile(stream) as archive:
            for info in archive.infolist():
                ctx.where = display
                if info.is_dir():
                    continue
                with archive.open(info) as raw:
                    member = _Guard(cast(BinaryIO, raw), lambda info=info: info.compress_size, ctx.budget)  # type: ignore[misc]
                    shown = member_display(info.filename)
                    yield from _nested(cast(BinaryIO, member), f"{display}!{shown}", shown, depth, ctx)
                ctx.where = display
    finally:
        if spooled is not None:
            spooled.close()


def _zip_entries(stream: BinaryIO) -> int:
    """How many entries a zip's end record declares (0 when it has none: zipfile will say why)."""
    try:
        record = zipfile._EndRecData(stream)  # type: ignore[attr-defined]
    except OSError:
        record = None
    finally:
        stream.seek(0)
    return int(record[zipfile._ECD_ENTRIES_TOTAL]) if record else 0  # type: ignore[attr-defined]


@dataclass
class Member:
    """A plain file found inside an archive by the listing pass."""

    display: str
    name: str
    index: int
    length: int = 0  # bytes the listing pass could read; a re-read stops here
    data: bytes | None = None  # kept from the listing pass when small


def describe(exc: BaseException) -> str:
    if isinstance(exc, ArchiveError):
        return str(exc)
    text = str(exc).strip() or type(exc).__name__
    return f"truncated or corrupt ({text})"


class SharedArchive:
    """One sequential reader for all members of one top-level archive.

    Opening members in index order continues the same decompression; opening an earlier member
    starts the archive again (correct, only slower).
    """

    def __init__(self, path: Path, display: str, members: list[Member]) -> None:
        self.path = path
        self.display = display
        self.members = members
        self._file: BinaryIO | None = None
        self._leaves: Iterator[Leaf] | None = None
        self._next = 0  # index of the member the reader produces next
        self.restarts = 0

    def _restart(self) -> None:
        self.close()
        self._file = open(self.path, "rb")
        muted = Context(warn=lambda path, message: None, budget=Budget(limit=1 << 62))
        self._leaves = walk(self._file, self.display, self.path.name, 0, muted, seekable=True)
        self._next = 0
        self.restarts += 1

    def open(self, index: int) -> BinaryIO:
        member = self.members[index]
        if member.data is not None:
            return io.BytesIO(member.data)
        if self._leaves is None or self._next > index:
            self._restart()
        assert self._leaves is not None
        while True:
            try:
                _, _, stream = next(self._leaves)
            except StopIteration:
                raise OSError("archive changed since it was listed") from None
            except READ_ERRORS as exc:
                raise OSError(describe(exc)) from exc
            position = self._next
            self._next += 1
            if position == index:
                return _MemberReader(stream, member.length)  # type: ignore[return-value]

    def close(self) -> None:
        if self._leaves is not None:
            self._leaves.close()  # type: ignore[attr-defined]
            self._leaves = None
        if self._file is not None:
            self._file.close()
            self._file = None


class _MemberReader(Reader):
    """A member on a re-read: exactly the bytes the listing pass saw, errors as OSError."""

    def __init__(self, stream: BinaryIO, length: int) -> None:
        self._stream = stream
        self._left = length

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        if self._left <= 0:
            return b""
        want = self._left if size is None or size < 0 else min(size, self._left)
        try:
            data = self._stream.read(want)
        except READ_ERRORS as exc:
            raise OSError(describe(exc)) from exc
        self._left -= len(data)
        return data


def list_members(path: Path, display: str, ctx: Context, cache: list[int]) -> list[Member] | None:
    """The listing pass over one file; None when it is not an archive or compressed file after all.

    `cache` holds the bytes still allowed for keeping members in memory (shared by all archives).
    A damaged archive gives one warning and the members (and part of a member) read before it.
    """
    with open(path, "rb") as handle:
        if sniff(_read_at_least(handle, PEEK)) is None:
            return None
        handle.seek(0)
        members: list[Member] = []
        leaves = walk(handle, display, path.name, 0, ctx, seekable=True)  # type: ignore[arg-type]
        ctx.member_failed = ctx.depth_warned = False  # both are told once per archive
        try:
            while True:
                try:
                    leaf_display, leaf_name, stream = next(leaves)
                except StopIteration:
                    break
                except READ_ERRORS as exc:
                    # After a member failed, the container usually fails for the same reason
                    # (a truncated stream): that is one problem, already told.
                    if not ctx.member_failed:
                        ctx.warn(ctx.where or display, f"{describe(exc)}; diagnosed what could be read")
                    break
                if len(members) >= MAX_MEMBERS:
                    ctx.warn(display, f"more than {MAX_MEMBERS} files in the archive; the rest not read")
                    break
                member = Member(leaf_display, leaf_name, len(members))
                members.append(member)
                try:
                    _read_member(stream, member, cache)
                except READ_ERRORS as exc:
                    # A bomb or a corrupt member inside a sound archive: the members after it
                    # are still worth reading.
                    ctx.warn(leaf_display, f"{describe(exc)}; diagnosed what could be read")
                    ctx.member_failed = True
        finally:
            leaves.close()  # type: ignore[attr-defined]
    return members


def _read_member(stream: BinaryIO, member: Member, cache: list[int]) -> None:
    kept: bytearray | None = bytearray() if cache[0] > 0 else None
    while True:
        try:
            chunk = stream.read(COPY)
        except READ_ERRORS:
            # What was read of a member that failed is what a re-read gives too (the same bytes,
            # up to `length`), so it may be kept, but only when it is small.
            if kept is not None and len(kept) <= COPY:
                member.data = bytes(kept)
                cache[0] -= len(kept)
            raise
        if not chunk:
            break
        member.length += len(chunk)
        if kept is not None:
            kept += chunk
            if len(kept) > cache[0]:
                kept = None
    if kept is not None:
        member.data = bytes(kept)
        cache[0] -= len(kept)
