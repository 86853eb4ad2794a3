"""The stages wired together: inputs → read/scan → facts → infer → rank → assemble → redact."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from ..base.contract import Diagnosis
from ..base.errors import InputError
from ..infer.fact import BaseFact
from ..infer.registry import get_engine
from ..infer.results import Inference
from ..inputs.discover import Source, Warning, discover, sort_key
from ..kb.knowledge import KnowledgeBase
from ..kb.load import load_knowledge_base
from ..kb.regexes import SlowPatterns, patterns_run
from .assemble import build_diagnosis
from .facts import echo_facts, failure_facts, hit_facts, run_facts, stack_facts
from .progress import tracked
from .rank import Ranking, rank
from .read import read_sources
from .redact import finish_model
from .render import FORMATS, format_diagnosis
from .scan import FileScan, scanner_for
from .timeline import RunDetails, build_details


@dataclass
class Analysis:
    """Everything a diagnosis rests on, for `explain` and tests; `diagnosis` is the public result."""

    kb: KnowledgeBase
    scans: list[FileScan]
    facts: list[BaseFact]
    inference: Inference
    ranking: Ranking
    diagnosis: Diagnosis
    warnings: list[Warning] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    redacted: bool = True

    def details(self) -> RunDetails:
        """What the html format shows beyond the diagnosis: one timeline row per process and the
        redacted log excerpts around the cited lines. Reads the inputs once more, so it is built
        only when asked for."""
        return build_details(self.scans, self.inference, self.diagnosis, self.sources, self.redacted)


def analyse(
    paths: Sequence[str],
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    mode: str = "diagnose",
    stdin: BinaryIO | None = None,
    kb: KnowledgeBase | None = None,
    redact: bool = True,
    jobs: int = 1,
) -> Analysis:
    if not paths:
        raise InputError("no input given")
    kb = kb or load_knowledge_base(rules_dirs)
    # One run of slow patterns: a signature or `matches:` pattern that times out is disabled for
    # the rest of this diagnosis (see kb.regexes).
    with patterns_run(reuse=False) as slow:
        return _analyse(paths, kb, engine, mode, stdin, redact, jobs, slow)


def _analyse(
    paths: Sequence[str], kb: KnowledgeBase, engine: str, mode: str, stdin: BinaryIO | None, redact: bool, jobs: int, slow: SlowPatterns
) -> Analysis:
    warnings: list[Warning] = []
    sources = sorted(discover(paths, warnings, stdin=stdin), key=sort_key)
    scanner = scanner_for(kb)
    scans: list[FileScan] = []
    facts: list[BaseFact] = []
    parsed: list[BaseFact] = []
    for scan, extra, notes in tracked(sources, read_sources(sources, kb, scanner, jobs)):
        warnings.extend(notes)
        parsed.extend(extra)
        if scan is not None:
            scans.append(scan)
    facts.extend(run_facts(mode, scans, len(sources)))
    facts.extend(stack_facts(kb, {s.display: s for s in sources}, scans, warnings))
    for scan in scans:
        facts.extend(hit_facts(scan))
        facts.extend(echo_facts(scan))
        facts.extend(failure_facts(scan))
    facts.extend(parsed)
    inference = get_engine(engine).run(kb.program, facts)
    warnings.extend(Warning(path, message) for path, message in slow.notes)
    ranking = rank(kb, inference)
    diagnosis = build_diagnosis(kb, scans, inference, ranking, warnings, mode)
    diagnosis = finish_model(diagnosis, redact)
    return Analysis(kb, scans, facts, inference, ranking, diagnosis, warnings, sources, redact)


def diagnose(
    paths: Sequence[str | os.PathLike[str]],
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    stdin: BinaryIO | None = None,
    redact: bool = True,
) -> Diagnosis:
    """Diagnose a run from its logs. Never prints and never exits; secrets are redacted unless asked.

    Raises InputError for a missing path, KnowledgeBaseError for invalid rule packs.
    """
    return analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, stdin=stdin, redact=redact).diagnosis


def preflight(
    paths: Sequence[str | os.PathLike[str]],
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    redact: bool = True,
) -> Diagnosis:
    """Check a config (and optional environment report) against the knowledge base's contracts."""
    return analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, mode="preflight", redact=redact).diagnosis


def report(
    paths: Sequence[str | os.PathLike[str]],
    fmt: str = "html",
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    stdin: BinaryIO | None = None,
    redact: bool = True,
) -> str:
    """Diagnose a run and write its report in one of FORMATS ("text", "markdown", "json", "html").

    The html page gets everything the analysis saw: one timeline row per process and redacted log
    excerpts around every cited line. Never prints; raises like `diagnose`, and ValueError for an
    unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    analysis = analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, stdin=stdin, redact=redact)
    return format_diagnosis(analysis.diagnosis, fmt, analysis.kb, details=analysis.details)


def render(diagnosis: Diagnosis, fmt: str = "text", *, kb: KnowledgeBase | None = None) -> str:
    """A diagnosis already in hand, in one of FORMATS. An html page made from a diagnosis alone has
    the six sections but no timeline and no excerpts (they need the logs: use `report`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return format_diagnosis(diagnosis, fmt, kb or load_knowledge_base())
