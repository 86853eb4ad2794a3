"""The html format: one self-contained page per diagnosis, and the index page of a batch.

Nothing is fetched: the style and the one small script are inline, and the page's Content Security
Policy allows no other script (the script is allowed by its hash), no connection, no image other than
inline data. Every value goes through Jinja's autoescaping, so a log line holding `<script>` shows
as text; every string is also cleaned of colour codes and control characters first.

What the page shows beyond the diagnosis (the per-process timeline, the excerpts around cited lines)
comes from `RunDetails` (pipeline/timeline.py), built from the analysis; without it the page has the
six sections and says where the timeline would come from.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jinja2 import ChoiceLoader, FileSystemLoader, StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup, escape

from ..base.contract import Diagnosis
from ..base.vocabulary import BUCKET_TITLES
from ..kb.knowledge import KnowledgeBase
from .timeline import RunDetails, clean, offset

STYLE = "report/html/style.css"
SCRIPT = "report/html/app.js"
_CODE = re.compile(r"`([^`\n]+)`")


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return clean(value)


def codespans(value: Any) -> Markup:
    """Escaped text with `backticked` spans as <code>."""
    escaped = str(escape(clean(str(value))))
    return Markup(_CODE.sub(lambda m: f"<code>{m.group(1)}</code>", escaped))


def percent(value: float) -> str:
    return f"{max(0.0, min(1.0, float(value))) * 100:.3f}%"


def _environment(kb: KnowledgeBase) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=ChoiceLoader([FileSystemLoader(str(p)) for p in kb.template_dirs]),
        undefined=StrictUndefined,
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["code"] = codespans
    env.filters["pct"] = percent
    env.filters["offset"] = offset
    return env


def environment(kb: KnowledgeBase) -> ImmutableSandboxedEnvironment:
    """The autoescaping sandbox the html templates render in, built once per knowledge base."""
    return kb.cache.get("html-templates", lambda: _environment(kb))


def _raw(env: ImmutableSandboxedEnvironment, name: str) -> str:
    assert env.loader is not None
    source, _filename, _uptodate = env.loader.get_source(env, name)
    return source


def _assets(env: ImmutableSandboxedEnvironment) -> dict[str, Any]:
    """The inline style and script, and the policy that lets exactly that script run."""
    style = _raw(env, STYLE)
    script = _raw(env, SCRIPT)
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    return {"style": Markup(style), "script": Markup(script), "policy": policy}


def _bucket_titles() -> dict[str, str]:
    return {b.value: t for b, t in BUCKET_TITLES.items()}


def patch_plan_text(diagnosis: Diagnosis) -> str:
    """The patch plan (and the smoke-test reduction) as the block a reader copies."""
    top = diagnosis.causes[0] if diagnosis.causes else None
    lines: list[str] = []
    if top is not None:
        lines += [f"[{p.kind.value}] {p.target}: {p.change}" for p in top.patch_plan]
        if not top.patch_plan:
            lines.append("see the minimal fix")
    if diagnosis.smoke_test:
        if lines:
            lines.append("")
        lines.append("# smoke test (reduce before another long run)")
        lines += [f"[{p.kind.value}] {p.target}: {p.change}" for p in diagnosis.smoke_test]
    return "\n".join(lines)


def render_html(kb: KnowledgeBase, diagnosis: Diagnosis, details: RunDetails | None = None) -> str:
    env = environment(kb)
    summary = env.get_template("report/summary.j2").render(d=diagnosis, bucket_titles=_bucket_titles())
    page = env.get_template("report/report.html.j2").render(
        d=diagnosis,
        details=details,
        summary=summary.strip(),
        plan=patch_plan_text(diagnosis),
        bucket_titles=_bucket_titles(),
        **_assets(env),
    )
    return page.rstrip() + "\n"


@dataclass
class IndexEntry:
    """One run of a batch as its index page lists it."""

    run: str
    page: str | None  # the run's page, relative to the index
    symptom: str | None = None
    bucket: str | None = None
    rule: str | None = None
    title: str | None = None
    score: float | None = None
    boundary: str | None = None
    error: str | None = None


@dataclass
class IndexPage:
    entries: list[IndexEntry]
    buckets: list[tuple[str, int]] = field(default_factory=list)
    causes: list[tuple[str, int]] = field(default_factory=list)
    errors: int = 0


def index_entry(record: dict[str, Any], page: str | None) -> IndexEntry:
    """An index row from a batch's JSON line."""
    run = str(record.get("run"))
    if "error" in record:
        return IndexEntry(run, None, error=str(record.get("error")))
    causes = record.get("causes") or []
    top = causes[0] if causes else {}
    boundary = record.get("boundary") or {}
    last, missing = boundary.get("last_completed"), boundary.get("first_missing")
    where = f"{last or 'no stage'} → {missing}" if missing else (f"{last}" if last else "")
    return IndexEntry(
        run,
        page,
        symptom=record.get("symptom"),
        bucket=record.get("primary_bucket"),
        rule=top.get("rule"),
        title=top.get("title"),
        score=top.get("score"),
        boundary=where or None,
    )


def index_page(entries: Sequence[IndexEntry]) -> IndexPage:
    buckets: dict[str, int] = {}
    causes: dict[str, int] = {}
    errors = 0
    for entry in entries:
        if entry.error is not None:
            errors += 1
            continue
        buckets[entry.bucket or "(none)"] = buckets.get(entry.bucket or "(none)", 0) + 1
        if entry.rule:
            causes[entry.rule] = causes.get(entry.rule, 0) + 1
    return IndexPage(
        list(entries),
        sorted(buckets.items(), key=lambda kv: (-kv[1], kv[0])),
        sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))[:20],
        errors,
    )


def render_index(kb: KnowledgeBase, page: IndexPage, title: str) -> str:
    env = environment(kb)
    text = env.get_template("report/index.html.j2").render(page=page, title=title, bucket_titles=_bucket_titles(), **_assets(env))
    return text.rstrip() + "\n"
