"""`batch`: every run under a folder, one JSON line each, resumable."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from types import FrameType

import click

from ..tools.batch import Interrupted, run_batch
from .common import EXIT_OK, report_errors
from .options import NO_REDACT, RULES_DIRS, jobs

EXIT_INTERRUPTED = 130


def _stdout_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _notice(message: str) -> None:
    click.echo(f"rltriage: {message}", err=True)


def _batch(root_or_list: str, jobs: int, output: str | None, executor: str, rules_dirs: Sequence[str], redact: bool, html: str | None = None) -> int:
    text = run_batch(
        root_or_list, jobs=jobs, output=output, executor=executor, rules_dirs=rules_dirs, redact=redact, write_line=_stdout_line, notice=_notice,
        html=html,
    )
    # The summary goes to stdout when the lines went to a file, to stderr when they went to stdout.
    stream = sys.stdout if output else sys.stderr
    stream.write(text)
    stream.flush()
    return EXIT_OK


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


@click.command("batch")
@click.argument("root_or_list", type=click.Path())
@jobs("Local worker processes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Append JSON lines here; rerun to resume.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where runs are diagnosed.")
@click.option("--html", "html", type=click.Path(file_okay=False), default=None, help="Also write a self-contained HTML page per run and index.html into this folder.")
@RULES_DIRS
@NO_REDACT
def batch_command(root_or_list: str, jobs: int, output: str | None, executor: str, html: str | None, rules_dirs: tuple[str, ...], no_redact: bool) -> None:
    """Diagnose every run under ROOT (or listed in a file), one JSON line per run, resumably.

    A run is a folder that directly holds log files, or an archive of one. Results come in sorted
    run order; with -o, a stopped batch resumes where it stopped when run again.
    """
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: keep the default
        pass
    try:
        code = report_errors(lambda: _batch(root_or_list, jobs, output, executor, rules_dirs, not no_redact, html))
    except (Interrupted, KeyboardInterrupt):
        click.echo("rltriage: batch interrupted; run the same command again to resume" if output else "rltriage: batch interrupted", err=True)
        code = EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    sys.exit(code)
