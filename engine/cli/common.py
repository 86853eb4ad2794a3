"""What every command shares: exit codes, how errors and warnings reach the user, where output
goes, and atomic writes."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import click

from ..base.contract import Diagnosis
from ..base.errors import InferenceError, InputError, KnowledgeBaseError
from ..base.text import printable

# 0 done (a diagnosis was produced, whether or not a failure was found); 1 a blocking problem or a
# failing check; 2 usage error or unreadable input; 3 knowledge-base error; 4 `watch` saw a stall.
EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_KB, EXIT_STALLED = 0, 1, 2, 3, 4


def report_errors(action: Callable[[], int]) -> int:
    """Run a command's action; turn the library's errors into one clear message and an exit code."""
    try:
        return action()
    except InputError as exc:
        click.echo(f"rltriage: {printable(str(exc))}", err=True)
        return EXIT_USAGE
    except KnowledgeBaseError as exc:
        click.echo(str(exc), err=True)
        click.echo(f"rltriage: knowledge base has {len(exc.problems)} problem(s)", err=True)
        return EXIT_KB
    except InferenceError as exc:
        click.echo(f"rltriage: {exc}", err=True)
        return EXIT_KB


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_atomic(text: str | Iterable[str], output: str | os.PathLike[str]) -> None:
    """Write beside the target and rename, so an interrupted run never leaves half a file; an
    existing file keeps its permissions, a new one gets the usual ones (not the temporary file's)."""
    target = Path(output)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            for piece in pieces(text):
                handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_NOT_WRITABLE = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


_OPEN_FD = re.compile(r"^/(?:dev/(?:std(?P<name>out|err)|fd/(?P<fd>\d+))|proc/(?:self|\d+)/fd/(?P<proc_fd>\d+))$")


def _open_descriptor(output: str) -> int | None:
    """The descriptor `-o /dev/stdout`, `/dev/fd/N` or `/proc/self/fd/N` names: written to as it is
    (a file the shell opened for appending stays appended to, a terminal or pipe is not replaced)."""
    match = _OPEN_FD.match(os.path.abspath(output))
    if match is None:
        return None
    if match.group("name"):
        return 1 if match.group("name") == "out" else 2
    if match.group("proc_fd") and not os.path.abspath(output).startswith(("/proc/self/", f"/proc/{os.getpid()}/")):
        return None
    return int(match.group("fd") or match.group("proc_fd"))


def check_output(output: str, inputs: Sequence[str] = ()) -> None:
    """Refuse, before any work, an `-o` that cannot or must not be written: one of the inputs (or a
    file inside an input folder, which was read as one), a folder, a block device or socket, a
    broken symbolic link, a file of /proc or /sys, a file in a folder that does not exist.
    InputError (exit 2) says why."""
    where = f"cannot write {output}"
    descriptor = _open_descriptor(output)
    if descriptor is not None:
        try:
            os.fstat(descriptor)
        except OSError as exc:
            raise InputError(f"{where}: descriptor {descriptor} is not open") from exc
        return
    if os.path.realpath(output).startswith(("/proc/", "/sys/")):
        raise InputError(f"{where}: a file of the kernel's /proc or /sys, not a report")
    if os.path.lexists(output) and not os.path.exists(output):
        raise InputError(f"{where}: a broken symbolic link (not followed)")
    if os.path.exists(output):
        info = os.stat(output)
        for test, kind in _NOT_WRITABLE:
            if test(info.st_mode):
                raise InputError(f"{where}: it is {kind}")
        if stat.S_ISREG(info.st_mode):
            real = os.path.realpath(output)
            for given in inputs:
                if given == "-" or not os.path.exists(given):
                    continue
                if os.path.isdir(given):
                    folder = os.path.realpath(given)
                    inside = os.path.commonpath([real, folder]) == folder
                else:
                    inside = os.path.samefile(output, given)
                if inside:
                    raise InputError(f"{where}: it is one of the inputs ({given}); refusing to overwrite it")
        return
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise InputError(f"{where}: folder {os.path.dirname(output) or parent} does not exist")


def _write_all(fd: int, text: str | Iterable[str]) -> None:
    for piece in pieces(text):
        view = memoryview(piece.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]


WRITE_PIECE = 1 << 20  # characters encoded at a time


def pieces(text: str | Iterable[str]) -> Iterator[str]:
    """A report a piece at a time, so that writing it never holds a second, encoded copy of all of
    it (the json of a folder of 100,000 files is some 13 MB). A report may come in parts already
    (`format_pieces`); a large part is cut too."""
    for part in (text,) if isinstance(text, str) else text:
        for start in range(0, len(part), WRITE_PIECE):
            yield part[start : start + WRITE_PIECE]


def write_report(text: str | Iterable[str], output: str, inputs: Sequence[str] = ()) -> None:
    """`-o`: a regular file (or a symbolic link to one, written through) is replaced atomically; a
    device such as /dev/null or a terminal, a pipe or FIFO (with a reader), /dev/stdout, is written
    to, never replaced; anything else is refused. Every failure is one InputError (exit 2)."""
    check_output(output, inputs)
    where = f"cannot write {output}"
    descriptor = _open_descriptor(output)
    try:
        if descriptor is not None:
            _write_all(descriptor, text)
            return
        if os.path.exists(output) and not stat.S_ISREG(os.stat(output).st_mode):
            fd = os.open(output, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                os.set_blocking(fd, True)
                _write_all(fd, text)
            finally:
                os.close(fd)
            return
        write_atomic(text, os.path.realpath(output))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise InputError(f"{where}: a named pipe with no reader") from exc
        raise InputError(f"{where}: {exc.strerror or exc}") from exc


def fail(message: str, code: int) -> None:
    click.echo(f"rltriage: {message}", err=True)
    sys.exit(code)


def write_output(text: str | Iterable[str], output: str | None, colour: bool | None = None, inputs: Sequence[str] = ()) -> None:
    if output is None:
        # colour=True keeps the ANSI codes when stdout is not a terminal.
        for piece in pieces(text):
            click.echo(piece, nl=False, color=colour)
    else:
        write_report(text, output, inputs)


def use_colour(output: str | None) -> bool:
    return output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ


def report_warnings(diagnosis: Diagnosis) -> None:
    for warning in diagnosis.warnings:
        click.echo(f"rltriage: warning: {printable(warning.path)}: {printable(warning.message)}", err=True)
