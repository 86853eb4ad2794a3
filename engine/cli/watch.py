"""`watch`: follow a live run; diagnose it when it stops progressing."""

from __future__ import annotations

import sys

import click

from ..pipeline.render import format_diagnosis
from ..tools.watch import watch
from .common import EXIT_OK, EXIT_STALLED, report_errors, report_warnings, use_colour
from .options import FORMAT, NO_REDACT, RULES_DIRS


@click.command("watch")
@click.argument("paths", nargs=-1, required=True)
@click.option("--stall-after", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True, help="Seconds without progress before the run counts as stalled.")
@click.option("--poll", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True, help="Seconds between two reads of the logs.")
@click.option("--on-stall", default=None, help="Shell command run on a stall, before the diagnosis (its output joins the inputs).")
@click.option("--on-stall-timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True, help="Seconds the on-stall command may run.")
@FORMAT
@RULES_DIRS
@NO_REDACT
def watch_command(
    paths: tuple[str, ...], stall_after: float, poll: float, on_stall: str | None, on_stall_timeout: float, fmt: str, rules_dirs: tuple[str, ...],
    no_redact: bool,
) -> None:
    """Follow a live run's logs; diagnose it when it stops progressing (exit 4), exit 0 when it finishes."""

    def status(message: str) -> None:
        click.echo(f"rltriage watch: {message}", err=True)

    def action() -> int:
        outcome = watch(
            paths, stall_after=stall_after, poll=poll, on_stall=on_stall, on_stall_timeout=on_stall_timeout, rules_dirs=rules_dirs, status=status,
            redacting=not no_redact,
        )
        if outcome.analysis is None:
            return EXIT_OK
        report_warnings(outcome.analysis.diagnosis)
        click.echo(format_diagnosis(outcome.analysis.diagnosis, fmt, outcome.analysis.kb, use_colour(None), details=outcome.analysis.details), nl=False)
        return EXIT_STALLED

    sys.exit(report_errors(action))
