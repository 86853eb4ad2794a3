"""`rules`: the contributor tooling — list, show, lint, test and scaffold rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..base.vocabulary import Bucket
from ..kb.fixtures import fixture_dirs, fixture_name, read_expectation
from ..kb.load import load_knowledge_base, resolve_packs
from ..tools.expectations import check_fixture, check_signature_examples
from ..tools.lint import lint, used_signatures
from ..tools.scaffold import scaffold
from .common import EXIT_FOUND, EXIT_OK, EXIT_USAGE, fail, report_errors
from .options import ENGINE, RULES_DIRS, VERBOSE, say_knowledge_base


@click.group()
def rules() -> None:
    """Work on the knowledge base: list, show, lint, test and scaffold rules."""


@rules.command("test")
@click.argument("ids", nargs=-1)
@RULES_DIRS
@ENGINE
@VERBOSE
def rules_test(ids: tuple[str, ...], rules_dirs: tuple[str, ...], engine: str, verbose: bool) -> None:
    """Run signature examples and fixture expectations through the real pipeline."""

    def action() -> int:
        kb = load_knowledge_base(rules_dirs)
        say_knowledge_base(kb.packs, verbose)
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
                named = {folder.name, fixture_name(folder), *(expect.fires if expect else []), *(expect.not_fires if expect else [])}
                if not named & set(ids):
                    continue
            outcome, _analysis = check_fixture(folder, kb, engine)
            failed += not outcome.ok
            click.echo(f"{'pass' if outcome.ok else 'FAIL'}  fixture {folder}")
            for failure in outcome.failures:
                click.echo(f"      {failure}")
        click.echo(f"{'FAILED' if failed else 'ok'}: {failed} failing")
        return EXIT_FOUND if failed else EXIT_OK

    sys.exit(report_errors(action))


@rules.command("lint")
@RULES_DIRS
@VERBOSE
def rules_lint(rules_dirs: tuple[str, ...], verbose: bool) -> None:
    """Schema and cross-file checks; every problem as path:line:col: error[CODE]: message."""
    sys.exit(report_errors(lambda: _lint(rules_dirs, verbose)))


def _lint(rules_dirs: tuple[str, ...], verbose: bool) -> int:
    say_knowledge_base(resolve_packs(rules_dirs), verbose)
    problems = lint(rules_dirs)
    for problem in problems:
        click.echo(str(problem))
    click.echo(f"{len(problems)} problem(s)" if problems else "no problems", err=bool(problems))
    return EXIT_FOUND if problems else EXIT_OK


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
            click.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                click.echo(f"{r['id']:<48} {r['type']:<9} {r['bucket'] or '-':<20} {r['status']:<12} {r['title']}")
        return EXIT_OK

    sys.exit(report_errors(action))


@rules.command("show")
@click.argument("item_id")
@RULES_DIRS
def rules_show(item_id: str, rules_dirs: tuple[str, ...]) -> None:
    """A rule or signature as written, with who consumes it, its templates and fixtures."""

    def action() -> int:
        kb = load_knowledge_base(rules_dirs)
        sig = kb.signatures.get(item_id)
        loaded = kb.rule(item_id)
        if sig is None and loaded is None:
            fail(f"no signature or rule with id '{item_id}'", EXIT_USAGE)
        if sig is not None:
            click.echo(f"# signature {sig.origin.display}")
            click.echo(sig.origin.path.read_text(encoding="utf-8").rstrip())
            consumers = sorted({r.id for r in used_signatures(kb).get(item_id, [])})
            click.echo(f"\n# used by rules: {', '.join(consumers) or 'none'}")
            click.echo(f"# prefilter literals: {list(sig.literals or [])}\n")
        if loaded is not None:
            click.echo(f"# rule {loaded.origin.display}")
            click.echo(loaded.origin.path.read_text(encoding="utf-8").rstrip())
            consumers = sorted(
                r.id for r in kb.rules for d in loaded.model.then.derive for _s, _i, p in r.model.when.patterns() if p.fact == d.fact
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
                    fires.append(fixture_name(folder))
                if item_id in expect.not_fires:
                    quiet.append(fixture_name(folder))
            click.echo(f"# fixtures that fire it: {', '.join(fires) or 'none'}")
            click.echo(f"# fixtures where it must not fire: {', '.join(quiet) or 'none'}")
        return EXIT_OK

    sys.exit(report_errors(action))


@rules.command("new")
@click.option("--bucket", required=True, type=click.Choice([b.value for b in Bucket]))
@click.option("--id", "item_id", required=True, help="NAMESPACE.NAME")
@click.option("--rules-dir", "target", default=".", show_default=True, type=click.Path(file_okay=False), help="Pack to write into.")
def rules_new(bucket: str, item_id: str, target: str) -> None:
    """Scaffold a signature, a rule, a fix template and two fixture runs."""
    try:
        written = scaffold(Path(target), item_id, bucket)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    for path in written:
        click.echo(f"wrote {path}")
