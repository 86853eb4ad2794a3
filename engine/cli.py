"""The command line: a thin layer over the library. Exit codes: 0 diagnosis produced, 1 blocking
problem found (preflight, rules test), 2 usage or unreadable input, 3 knowledge-base error."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import click

from . import __version__
from .errors import InferenceError, InputError, KnowledgeBaseError
from .load import load_knowledge_base
from .pipeline import analyse
from .render import render_report
from .result import Diagnosis

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_KB = 0, 1, 2, 3

FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
RULES_DIRS = click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
ENGINE = click.option("--engine", type=click.Choice(["default", "durable"]), default="default", show_default=True)
OUTPUT = click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report to this file.")


def fail(message: str, code: int) -> None:
    click.echo(f"rltriage: {message}", err=True)
    sys.exit(code)


def guarded(action: Callable[[], int]) -> int:
    try:
        return action()
    except InputError as exc:
        fail(str(exc), EXIT_USAGE)
    except KnowledgeBaseError as exc:
        click.echo(str(exc), err=True)
        fail(f"knowledge base has {len(exc.problems)} problem(s)", EXIT_KB)
    except InferenceError as exc:
        fail(str(exc), EXIT_KB)
    return EXIT_OK  # pragma: no cover


def write_output(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    target = Path(output)
    # Write beside the target and rename, so an interrupted run never leaves half a report.
    fd, tmp = tempfile.mkstemp(dir=target.parent or Path("."), prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def use_colour(output: str | None) -> bool:
    return output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ


def format_diagnosis(diagnosis: Diagnosis, fmt: str, kb: Any, colour: bool) -> str:
    if fmt == "json":
        return diagnosis.model_dump_json(indent=2) + "\n"
    return render_report(kb, diagnosis, fmt, colour=colour)


def report_warnings(diagnosis: Diagnosis) -> None:
    for warning in diagnosis.warnings:
        click.echo(f"rltriage: warning: {warning.path}: {warning.message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rltriage")
def main() -> None:
    """Why an RL post-training run hung at step 0, ran out of memory or failed at start-up."""


def _run(paths: Sequence[str], fmt: str, rules_dirs: Sequence[str], engine: str, output: str | None, mode: str) -> Diagnosis:
    stdin = sys.stdin.buffer if "-" in paths else None
    analysis = analyse(list(paths), rules_dirs=rules_dirs, engine=engine, mode=mode, stdin=stdin)
    report_warnings(analysis.diagnosis)
    write_output(format_diagnosis(analysis.diagnosis, fmt, analysis.kb, use_colour(output)), output)
    return analysis.diagnosis


@main.command()
@click.argument("paths", nargs=-1, required=True)
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
def diagnose(paths: tuple[str, ...], fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None) -> None:
    """Diagnose a run from its folder(s), files, or `-` for stdin."""
    sys.exit(guarded(lambda: (_run(paths, fmt, rules_dirs, engine, output, "diagnose"), EXIT_OK)[1]))


@main.command()
@click.argument("config", type=click.Path(exists=True))
@click.option("--env", "env_report", type=click.Path(exists=True), help="pip freeze or collect_env output.")
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
def preflight(config: str, env_report: str | None, fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None) -> None:
    """Check a run's config against the knowledge base's contracts before launching it."""

    def action() -> int:
        paths = [config] + ([env_report] if env_report else [])
        diagnosis = _run(paths, fmt, rules_dirs, engine, output, "preflight")
        return EXIT_FOUND if any(c.blocking for c in diagnosis.causes) else EXIT_OK

    sys.exit(guarded(action))


@main.command("schema")
def schema_command() -> None:
    """Print the JSON Schema of the diagnosis output."""
    import json

    click.echo(json.dumps(Diagnosis.model_json_schema(), indent=2, sort_keys=True))


def _load(rules_dirs: Sequence[str]) -> Any:
    return load_knowledge_base(rules_dirs)


@main.group()
def rules() -> None:
    """Work on the knowledge base: list, show, lint, test and scaffold rules."""


@rules.command("test")
@click.argument("ids", nargs=-1)
@RULES_DIRS
@ENGINE
def rules_test(ids: tuple[str, ...], rules_dirs: tuple[str, ...], engine: str) -> None:
    """Run signature examples and fixture expectations through the real pipeline."""

    def action() -> int:
        from .expectations import check_fixture, check_signature_examples, fixture_dirs, read_expectation

        kb = load_knowledge_base(rules_dirs)
        failed = 0
        for sig_id in sorted(kb.signatures):
            if ids and sig_id not in ids:
                continue
            problems = check_signature_examples(kb.signatures[sig_id], kb)
            failed += bool(problems)
            click.echo(f"{'FAIL' if problems else 'pass'}  signature {sig_id}")
            for problem in problems:
                click.echo(f"      {problem}")
        for folder in fixture_dirs(kb):
            if ids:
                try:
                    expect = read_expectation(folder)
                except ValueError:
                    expect = None
                named = {folder.name, *(expect.fires if expect else []), *(expect.not_fires if expect else [])}
                if not named & set(ids):
                    continue
            outcome, _analysis = check_fixture(folder, kb, engine)
            failed += not outcome.ok
            click.echo(f"{'pass' if outcome.ok else 'FAIL'}  fixture {folder}")
            for failure in outcome.failures:
                click.echo(f"      {failure}")
        click.echo(f"{'FAILED' if failed else 'ok'}: {failed} failing")
        return EXIT_FOUND if failed else EXIT_OK

    sys.exit(guarded(action))


if __name__ == "__main__":  # pragma: no cover
    main()
