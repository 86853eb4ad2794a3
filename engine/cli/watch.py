"""`watch`: follow a live run; diagnose it when it stops progressing."""

from __future__ import annotations

import sys

import click

from ..pipeline.render import format_diagnosis
from ..tools.watch import watch
from .common import EXIT_OK, EXIT_STALLED, report_errors, report_warnings
from .options import COLOR, FORMAT, NO_REDACT, RULES_DIRS, colour_wanted

# 5: the run crashed, or its processes (--pid) exited without finishing; the report is on stdout.
EXIT_CRASHED = 5


@click.command("watch")
@click.argument("paths", nargs=-1, required=True)
@click.option("--stall-after", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True, help="Seconds without progress before the run counts as stalled.")
@click.option("--poll", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True, help="Seconds between two reads of the logs.")
@click.option(
    "--on-stall", default=None,
    help="Shell command run on a stall, before the diagnosis (its output joins the inputs). Its environment holds PID and "
    "RLTRIAGE_PIDS (pids from --pid and the logs), RLTRIAGE_FILES, RLTRIAGE_PATHS, RLTRIAGE_DIAGNOSIS (JSON of the stalled run), "
    "RLTRIAGE_ON_STALL_OUTPUT and RLTRIAGE_STALLED_SECONDS.",
)
@click.option("--pid", "pids", type=click.IntRange(min=1), multiple=True, help="A process of the run (repeatable): when all are gone before the run finished, diagnose and exit 5.")
@click.option("--on-stall-timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True, help="Seconds the on-stall command may run.")
@FORMAT
@RULES_DIRS
@COLOR
@NO_REDACT
def watch_command(
    paths: tuple[str, ...], stall_after: float, poll: float, on_stall: str | None, pids: tuple[int, ...], on_stall_timeout: float, fmt: str,
    rules_dirs: tuple[str, ...],
    color: str,
    no_redact: bool,
) -> None:
    """Follow a live run's logs; exit 0 when it finishes. When it stops progressing, run --on-stall,
    diagnose and exit 4; when it crashes (or its --pid processes exit unfinished), diagnose at once
    and exit 5."""

    def status(message: str) -> None:
        click.echo(f"rltriage watch: {message}", err=True)

    def action() -> int:
        outcome = watch(
            paths, stall_after=stall_after, poll=poll, on_stall=on_stall, on_stall_timeout=on_stall_timeout, rules_dirs=rules_dirs, pids=pids,
            status=status, redacting=not no_redact,
        )
        if outcome.analysis is None:
            return EXIT_OK
        report_warnings(outcome.analysis.diagnosis)
        colour = colour_wanted(color, None)
        click.echo(format_diagnosis(outcome.analysis.diagnosis, fmt, outcome.analysis.kb, colour, details=outcome.analysis.details), nl=False, color=colour)
        return EXIT_STALLED if outcome.stalled else EXIT_CRASHED

    sys.exit(report_errors(action))
