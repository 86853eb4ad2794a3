"""`diff GOOD BAD`: what changed since the last healthy run."""

from __future__ import annotations

import sys

import click

from ..tools.diff import diff_runs, render_diff
from .common import EXIT_OK, report_errors, use_colour, write_output
from .options import ENGINE, NO_REDACT, OUTPUT, RULES_DIRS, jobs


@click.command("diff")
@click.argument("good")
@click.argument("bad")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
@jobs("Worker processes reading files in parallel; for a single large log, threads scanning its chunks.")
def diff_command(good: str, bad: str, fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool, jobs: int) -> None:
    """Compare a healthy run (GOOD) with a broken one (BAD): folders, files or archives.

    Prints where their boundaries diverge, the packages, driver/CUDA/kernel, environment variables
    and config keys that differ, failure lines found only in the broken run, and the broken run's
    causes re-ranked by what changed. Exit codes as for `diagnose`.
    """

    def action() -> int:
        result, _good, bad_run = diff_runs([good], [bad], rules_dirs=rules_dirs, engine=engine, redact=not no_redact, jobs=jobs)
        for warning in [*_good.diagnosis.warnings, *bad_run.diagnosis.warnings]:
            click.echo(f"rltriage: warning: {warning.path}: {warning.message}", err=True)
        fmt_name = "json" if fmt == "json" else fmt
        write_output(render_diff(bad_run.kb, result, fmt_name, use_colour(output)), output)
        return EXIT_OK

    sys.exit(report_errors(action))
