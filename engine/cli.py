"""The command line: a thin layer over the library. Exit codes: 0 diagnosis produced, 1 blocking
problem found (preflight, rules test), 2 usage or unreadable input, 3 knowledge-base error."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from . import __version__
from .commands import EXIT_FOUND, EXIT_OK, EXIT_USAGE, report_errors, write_atomic
from .load import load_knowledge_base
from .pipeline import analyse
from .render import render_report
from .result import Diagnosis
from .vocabulary import Bucket

FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
RULES_DIRS = click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
ENGINE = click.option("--engine", type=click.Choice(["default", "durable"]), default="default", show_default=True)
OUTPUT = click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report to this file.")
JOBS = click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True, help="Worker processes reading files in parallel.")
NO_REDACT = click.option("--no-redact", is_flag=True, help="Keep tokens, keys and passwords in the output.")


def fail(message: str, code: int) -> None:
    click.echo(f"rltriage: {message}", err=True)
    sys.exit(code)


def guarded(action: Callable[[], int]) -> int:
    return report_errors(action)


def write_output(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=False)
    else:
        write_atomic(text, output)


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


def _run(
    paths: Sequence[str], fmt: str, rules_dirs: Sequence[str], engine: str, output: str | None, mode: str, no_redact: bool, jobs: int = 1
) -> Diagnosis:
    stdin = sys.stdin.buffer if "-" in paths else None
    analysis = analyse(list(paths), rules_dirs=rules_dirs, engine=engine, mode=mode, stdin=stdin, redact=not no_redact, jobs=jobs)
    report_warnings(analysis.diagnosis)
    write_output(format_diagnosis(analysis.diagnosis, fmt, analysis.kb, use_colour(output)), output)
    return analysis.diagnosis


@main.command()
@click.argument("paths", nargs=-1, required=True)
@FORMAT
@RULES_DIRS
@ENGINE
@OUTPUT
@NO_REDACT
@JOBS
def diagnose(
    paths: tuple[str, ...], fmt: str, rules_dirs: tuple[str, ...], engine: str, output: str | None, no_redact: bool, jobs: int
) -> None:
    """Diagnose a run from its folder(s), files, or `-` for stdin."""
    sys.exit(guarded(lambda: (_run(paths, fmt, rules_dirs, engine, output, "diagnose", no_redact, jobs), EXIT_OK)[1]))


@main.command()
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

    sys.exit(guarded(action))


@main.command("schema")
@click.argument("name", type=click.Choice(["diagnosis", "signature", "rule", "fixture"]), default="diagnosis")
def schema_command(name: str) -> None:
    """Print a JSON Schema: the diagnosis output, or a knowledge-base file type for editors."""
    from .schemas import schema_text

    click.echo(schema_text(name), nl=False)


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


@rules.command("lint")
@RULES_DIRS
def rules_lint(rules_dirs: tuple[str, ...]) -> None:
    """Schema and cross-file checks; every problem as path:line:col: error[CODE]: message."""
    from .lint import lint

    problems = lint(rules_dirs)
    for problem in problems:
        click.echo(str(problem))
    click.echo(f"{len(problems)} problem(s)" if problems else "no problems", err=bool(problems))
    sys.exit(EXIT_FOUND if problems else EXIT_OK)


def _entries(kb: Any) -> list[dict[str, Any]]:
    rows = []
    for sig in kb.signatures.values():
        m = sig.model
        rows.append({"id": m.id, "type": "signature", "bucket": None, "title": m.title, "status": m.status.value, "source": m.source, "path": sig.origin.display})
    for loaded in kb.rules:
        m = loaded.model
        rows.append(
            {"id": m.id, "type": "rule", "bucket": m.bucket.value if m.bucket else None, "title": m.title, "status": m.status.value, "source": m.source, "path": loaded.origin.display}
        )
    return sorted(rows, key=lambda r: (r["type"], r["id"]))


@rules.command("list")
@click.option("--bucket", default=None, help="Only rules of this bucket.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@RULES_DIRS
def rules_list(bucket: str | None, fmt: str, rules_dirs: tuple[str, ...]) -> None:
    """Every signature and rule: id, bucket, title, status, source."""

    def action() -> int:
        rows = _entries(load_knowledge_base(rules_dirs))
        if bucket:
            rows = [r for r in rows if r["bucket"] == bucket]
        if fmt == "json":
            import json

            click.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                click.echo(f"{r['id']:<48} {r['type']:<9} {r['bucket'] or '-':<20} {r['status']:<12} {r['title']}")
        return EXIT_OK

    sys.exit(guarded(action))


@rules.command("show")
@click.argument("item_id")
@RULES_DIRS
def rules_show(item_id: str, rules_dirs: tuple[str, ...]) -> None:
    """A rule or signature as written, with who consumes it, its templates and fixtures."""

    def action() -> int:
        from .expectations import fixture_dirs, read_expectation
        from .lint import _used_signatures

        kb = load_knowledge_base(rules_dirs)
        sig = kb.signatures.get(item_id)
        loaded = kb.rule(item_id)
        if sig is None and loaded is None:
            fail(f"no signature or rule with id '{item_id}'", EXIT_USAGE)
        if sig is not None:
            click.echo(f"# signature {sig.origin.display}")
            click.echo(sig.origin.path.read_text(encoding="utf-8").rstrip())
            consumers = sorted({r.id for r in _used_signatures(kb).get(item_id, [])})
            click.echo(f"\n# used by rules: {', '.join(consumers) or 'none'}")
            click.echo(f"# prefilter literals: {list(sig.literals or [])}\n")
        if loaded is not None:
            click.echo(f"# rule {loaded.origin.display}")
            click.echo(loaded.origin.path.read_text(encoding="utf-8").rstrip())
            consumers = sorted(
                r.id for r in kb.rules for d in loaded.model.then.derive for p in [*r.model.when.all, *r.model.when.any, *r.model.when.none] if p.fact == d.fact
            )
            click.echo(f"\n# facts it derives are consumed by: {', '.join(sorted(set(consumers))) or 'none'}")
            click.echo(f"# fix template: {loaded.model.fix_template or 'inline'}")
            fires, quiet = [], []
            for folder in fixture_dirs(kb):
                try:
                    expect = read_expectation(folder)
                except ValueError:
                    continue
                if item_id in expect.fires:
                    fires.append(folder.name)
                if item_id in expect.not_fires:
                    quiet.append(folder.name)
            click.echo(f"# fixtures that fire it: {', '.join(fires) or 'none'}")
            click.echo(f"# fixtures where it must not fire: {', '.join(quiet) or 'none'}")
        return EXIT_OK

    sys.exit(guarded(action))


@rules.command("new")
@click.option("--bucket", required=True, type=click.Choice([b.value for b in Bucket]))
@click.option("--id", "item_id", required=True, help="NAMESPACE.NAME")
@click.option("--rules-dir", "target", default=".", show_default=True, type=click.Path(file_okay=False), help="Pack to write into.")
def rules_new(bucket: str, item_id: str, target: str) -> None:
    """Scaffold a signature, a rule, a fix template and two fixture runs."""
    from .scaffold import scaffold

    try:
        written = scaffold(Path(target), item_id, bucket)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    for path in written:
        click.echo(f"wrote {path}")


@main.command("explain")
@click.argument("paths", nargs=-1, required=True)
@click.option("--cause", default=None, help="Rule id of the cause to explain.")
@click.option("--bucket", default=None, help="Explain the causes and near misses of one bucket.")
@RULES_DIRS
@ENGINE
@NO_REDACT
def explain_command(paths: tuple[str, ...], cause: str | None, bucket: str | None, rules_dirs: tuple[str, ...], engine: str, no_redact: bool) -> None:
    """Why a cause ranked where it did: facts, rule chain, weights, guards and near misses."""

    def action() -> int:
        from .explain import explain
        from .redact import redact

        analysis = analyse(list(paths), rules_dirs=rules_dirs, engine=engine, redact=not no_redact)
        text = explain(analysis, cause=cause, bucket=bucket)
        click.echo(text if no_redact else redact(text), nl=False)
        return EXIT_OK

    sys.exit(guarded(action))


def _register_commands() -> None:
    """Commands that live in their own modules."""
    from .batch import batch_command
    from .smoke import smoke_command
    from .verify import verify_command
    from .watch import watch_command

    for command in (batch_command, watch_command, verify_command, smoke_command):
        main.add_command(command)


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
