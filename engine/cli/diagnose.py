"""`diagnose`, `preflight` and `explain`: a diagnosis of a run, or of a config before the run."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ..base.contract import Diagnosis
from ..pipeline.render import format_diagnosis
from ..pipeline.run import analyse
from ..tools.explain import explain
from .common import EXIT_FOUND, EXIT_OK, check_output, report_errors, report_warnings, use_colour, write_output
from .options import ENGINE, FORMAT, NO_REDACT, OUTPUT, RULES_DIRS, jobs, output_format


def _run(
    paths: Sequence[str], fmt: str, rules_dirs: Sequence[str], engine: str, output: str | None, mode: str, no_redact: bool, jobs: int = 1
) -> Diagnosis:
    stdin = sys.stdin.buffer if "-" in paths else None
    if output is not None:
        check_output(output, paths)  # before the work, not after
    analysis = analyse(list(paths), rules_dirs=rules_dirs, engine=engine, mode=mode, stdin=stdin, redact=not no_redact, jobs=jobs)
    report_warnings(analysis.diagnosis)
    fmt = output_format(fmt, output)
    write_output(format_diagnosis(analysis.diagnosis, fmt, analysis.kb, use_colour(output), details=analysis.details), output, paths)
    return analysis.diagnosis


@click.command()
@click.argument("paths", nargs=-1, required=True)
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
@jobs("Worker processes reading files in parallel.")
def diagnose(
    paths: tuple[str, ...], fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool, jobs: int
) -> None:
    """Diagnose a run from its folder(s), files, or `-` for stdin."""
    sys.exit(report_errors(lambda: (_run(paths, fmt, rules_dirs, engine, output, "diagnose", no_redact, jobs), EXIT_OK)[1]))


@click.command()
@click.argument("config", type=click.Path(exists=True))
@click.option("--env", "env_report", type=click.Path(exists=True), help="pip freeze or collect_env output.")
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
def preflight(
    config: str, env_report: str | None, fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool
) -> None:
    """Check a run's config against the knowledge base's contracts before launching it."""

    def action() -> int:
        paths = [config] + ([env_report] if env_report else [])
        diagnosis = _run(paths, fmt, rules_dirs, engine, output, "preflight", no_redact)
        return EXIT_FOUND if any(c.blocking for c in diagnosis.causes) else EXIT_OK

    sys.exit(report_errors(action))


@click.command("explain")
@click.argument("paths", nargs=-1, required=True)
@click.option("--cause", default=None, help="Rule id of the cause to explain.")
@click.option("--bucket", default=None, help="Explain the causes and near misses of one bucket.")
@RULES_DIRS
@ENGINE
@NO_REDACT
def explain_command(paths: tuple[str, ...], cause: str | None, bucket: str | None, rules_dirs: tuple[str, ...], engine: str, no_redact: bool) -> None:
    """Why a cause ranked where it did: facts, rule chain, weights, guards and near misses."""

    def action() -> int:
        analysis = analyse(list(paths), rules_dirs=rules_dirs, engine=engine, redact=not no_redact)
        click.echo(explain(analysis, cause=cause, bucket=bucket, redacting=not no_redact), nl=False)
        return EXIT_OK

    sys.exit(report_errors(action))
