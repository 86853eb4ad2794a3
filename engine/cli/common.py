"""What every command shares: exit codes, how errors and warnings reach the user, where output
goes, and atomic writes."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import click

from ..base.contract import Diagnosis
from ..base.errors import InferenceError, InputError, KnowledgeBaseError

# 0 done (a diagnosis was produced, whether or not a failure was found); 1 a blocking problem or a
# failing check; 2 usage error or unreadable input; 3 knowledge-base error; 4 `watch` saw a stall.
EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_KB, EXIT_STALLED = 0, 1, 2, 3, 4


def report_errors(action: Callable[[], int]) -> int:
    """Run a command's action; turn the library's errors into one clear message and an exit code."""
    try:
        return action()
    except InputError as exc:
        click.echo(f"rltriage: {exc}", err=True)
        return EXIT_USAGE
    except KnowledgeBaseError as exc:
        click.echo(str(exc), err=True)
        click.echo(f"rltriage: knowledge base has {len(exc.problems)} problem(s)", err=True)
        return EXIT_KB
    except InferenceError as exc:
        click.echo(f"rltriage: {exc}", err=True)
        return EXIT_KB


def write_atomic(text: str, output: str | os.PathLike[str]) -> None:
    """Write beside the target and rename, so an interrupted run never leaves half a file; an
    existing file keeps its permissions."""
    target = Path(output)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())  # a new file gets what open() would give it, not mkstemp's 0600
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fail(message: str, code: int) -> None:
    click.echo(f"rltriage: {message}", err=True)
    sys.exit(code)


def write_output(text: str, output: str | None, colour: bool | None = None) -> None:
    if output is None:
        # In slices: a report of 100,000 inputs is not encoded into one more copy of itself; colour=True
        # keeps the ANSI codes when stdout is not a terminal.
        for start in range(0, len(text), 1 << 20):
            click.echo(text[start : start + (1 << 20)], nl=False, color=colour)
    else:
        write_atomic(text, output)


def use_colour(output: str | None) -> bool:
    return output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ


def report_warnings(diagnosis: Diagnosis) -> None:
    for warning in diagnosis.warnings:
        click.echo(f"rltriage: warning: {warning.path}: {warning.message}", err=True)
