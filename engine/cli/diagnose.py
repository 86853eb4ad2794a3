"""`diagnose`, `preflight` and `explain`: a diagnosis of a run, or of a config before the run."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ..base.contract import Diagnosis
from ..base.errors import InputError
from ..pipeline.render import format_pieces
from ..pipeline.run import analyse
from ..tools.explain import explain
from .common import EXIT_FOUND, EXIT_OK, check_output, report_errors, report_warnings, write_output
from .options import COLOR, ENGINE, FORMAT, NO_REDACT, OUTPUT, RULES_DIRS, VERBOSE, colour_wanted, jobs, output_format, say_knowledge_base


def _run(
    paths: Sequence[str], fmt: str, rules_dirs: Sequence[str], engine: str, output: str | None, mode: str, no_redact: bool, jobs: int = 1,
    verbose: bool = False,
    color: str = "auto",
    settings: dict[str, object] | None = None,
    same_run: bool = True,
) -> Diagnosis:
    stdin = sys.stdin.buffer if "-" in paths else None
    if output is not None:
        check_output(output, paths)  # before the work, not after
    fmt = output_format(fmt, output)
    # Only the html page reads the inputs and the analysis again: for the others the inputs are let
    # go once read, and the analysis before the report is written (a folder of 100,000 files holds
    # as many sources, scans and facts).
    html = fmt == "html"
    analysis = analyse(
        list(paths), rules_dirs=rules_dirs, engine=engine, mode=mode, stdin=stdin, redact=not no_redact, jobs=jobs, settings=settings,
        one_run=not same_run, details=html,
    )
    say_knowledge_base(analysis.kb.packs, verbose)
    diagnosis, kb = analysis.diagnosis, analysis.kb
    details = analysis.details if html else None
    del analysis
    report_warnings(diagnosis)
    colour = colour_wanted(color, output)
    write_output(format_pieces(diagnosis, fmt, kb, colour, details=details), output, colour, paths)
    return diagnosis


@click.command()
@click.argument("paths", nargs=-1, required=True)
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
@jobs("Worker processes reading files in parallel; for a single large log, threads scanning its chunks.")
@VERBOSE
@COLOR
@click.option("--same-run", is_flag=True, help="The folders or archives given are parts of one run, even if their settings differ.")
def diagnose(
    paths: tuple[str, ...], fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool, jobs: int, verbose: bool,
    color: str, same_run: bool,
) -> None:
    """Diagnose a run from its folder(s), files, or `-` for stdin.

    Folders or archives given together are read as parts of one run; when their configs or logs
    give one setting two values they are two runs, and the command stops (exit 2) unless --same-run.
    """
    sys.exit(
        report_errors(lambda: (_run(paths, fmt, rules_dirs, engine, output, "diagnose", no_redact, jobs, verbose, color, same_run=same_run), EXIT_OK)[1])
    )


@click.command()
@click.argument("config", type=click.Path(exists=True))
@click.option("--env", "env_report", type=click.Path(exists=True), help="pip freeze or collect_env output.")
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
@COLOR
@click.option(
    "--num-processes", "--world-size", "num_processes", type=click.IntRange(min=1), default=None,
    help="Training processes the run will have (accelerate's num_processes, torchrun's world size); "
    "replaces the config's value. Without either, one process is assumed and the report says so.",
)
def preflight(
    config: str, env_report: str | None, fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool, color: str,
    num_processes: int | None,
) -> None:
    """Check a run's config against the knowledge base's contracts before launching it."""

    def action() -> int:
        paths = [config] + ([env_report] if env_report else [])
        settings: dict[str, object] = {"num_processes": num_processes} if num_processes else {}
        diagnosis = _run(paths, fmt, rules_dirs, engine, output, "preflight", no_redact, color=color, settings=settings)
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
        try:
            text = explain(analysis, cause=cause, bucket=bucket, redacting=not no_redact)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        click.echo(text, nl=False)
        return EXIT_OK

    sys.exit(report_errors(action))
