"""The stages wired together: inputs → read/scan → facts → infer → rank → assemble → redact."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import BinaryIO

from ..base.contract import Diagnosis
from ..base.errors import InputError
from ..infer.fact import BaseFact, Fact
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
from .scan import FileScan, compact, scanner_for
from .timeline import RunDetails, build_details


@dataclass
class Analysis:
    """Everything a diagnosis rests on, for `explain` and tests; `diagnosis` is the public result."""

    kb: KnowledgeBase
    scans: list[FileScan]
    facts: list[Fact]  # the facts asserted, as the engine numbered them (without those rules derived)
    inference: Inference
    ranking: Ranking
    diagnosis: Diagnosis
    warnings: list[Warning] = field(default_factory=list)
    # The inputs, to read again for `details`; None when the analysis was made without them.
    sources: list[Source] | None = field(default_factory=list)
    redacted: bool = True

    def details(self) -> RunDetails:
        """What the html format shows beyond the diagnosis: one timeline row per process and the
        redacted log excerpts around the cited lines. Reads the inputs once more, so it is built
        only when asked for."""
        if self.sources is None:
            raise ValueError("this analysis was made with details=False: it kept no inputs to read again")
        return build_details(self.scans, self.inference, self.diagnosis, self.sources, self.redacted)


# Settings that differ between the nodes or processes of one run, never a sign of two runs.
_PER_PROCESS = re.compile(r"rank|node|host|addr|port|(?:^|_)ip(?:$|_)|pid|device|visible|local|hostname", re.IGNORECASE)


def different_runs(paths: Sequence[str], facts: Iterable[BaseFact]) -> str | None:
    """Why the folders or archives given together are two different runs (a setting the configs or
    logs of one give another value than the other's), or None when nothing says so."""
    groups = [p for p in paths if p != "-" and (os.path.isdir(p) or _is_archive(p))]
    if len(groups) < 2:
        return None
    seen: list[dict[str, tuple[str, str]]] = [{} for _ in groups]
    # As in the report: a config file's value wins over a value echoed in a log.
    for fact in sorted((f for f in facts if f.type == "config"), key=lambda f: f.fields.get("source") != "file"):
        name, where = str(fact.fields.get("name")), str(fact.fields.get("path"))
        if _PER_PROCESS.search(name):
            continue
        for index, given in enumerate(groups):
            prefix = os.path.normpath(given)
            if where == prefix or where.startswith(prefix + os.sep) or where.startswith(given + "!"):
                seen[index].setdefault(name, (repr(fact.fields.get("value")), f"{where}:{fact.fields.get('line')}"))
                break
    for first in range(len(groups)):
        for second in range(first + 1, len(groups)):
            for name in sorted(seen[first].keys() & seen[second].keys()):
                (one, at_one), (two, at_two) = seen[first][name], seen[second][name]
                if one != two:
                    return f"{groups[first]} and {groups[second]} look like two different runs: {name} is {one} at {at_one} but {two} at {at_two}"
    return None


def _is_archive(path: str) -> bool:
    return os.path.isfile(path) and bool(re.search(r"\.(?:tar(?:\.\w+)?|tgz|zip|zst)$", path))


def _kept(result: tuple[FileScan | None, list[BaseFact], list[Warning]]) -> tuple[FileScan | None, Sequence[BaseFact], Sequence[Warning]]:
    """What is kept of a source's result until every source is read: the scan made compact and the
    empty lists replaced by the one empty tuple, as each result comes. Done at the end instead,
    100,000 files would keep their empty containers until then, and free them in one go into
    memory the rest of the run cannot all reuse."""
    scan, extra, notes = result
    return (compact(scan) if scan is not None else None, extra or (), notes or ())


def _name_order(source: Source) -> tuple[str, ...]:
    """Sources by the names they are cited with; an archive's members by member name."""
    return (source.display,)


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
    settings: Mapping[str, object] | None = None,
    one_run: bool = False,
    details: bool = True,
) -> Analysis:
    """`settings` are config values given on the command line (`preflight --num-processes 8`):
    they replace what the config and the logs say for the same name. With `one_run`, folders or
    archives given together that are plainly two different runs raise InputError instead of being
    merged into one diagnosis. With `details=False` the inputs are let go once read (a folder of
    100,000 files holds as many): the analysis then has no `details` (the html page's timeline and
    excerpts)."""
    if not paths:
        raise InputError("no input given")
    kb = kb or load_knowledge_base(rules_dirs)
    # One run of slow patterns: a signature or `matches:` pattern that times out is disabled for
    # the rest of this diagnosis (see kb.regexes).
    with patterns_run(reuse=False) as slow:
        return _analyse(paths, kb, engine, mode, stdin, redact, jobs, slow, settings, one_run, details)


def _analyse(
    paths: Sequence[str], kb: KnowledgeBase, engine: str, mode: str, stdin: BinaryIO | None, redact: bool, jobs: int, slow: SlowPatterns,
    settings: Mapping[str, object] | None, one_run: bool, details: bool,
) -> Analysis:
    warnings: list[Warning] = []
    sources = sorted(discover(paths, warnings, stdin=stdin), key=sort_key)
    if not sources:
        # Nothing to read is not "no failure found": say so instead of reporting on zero inputs.
        why = f" ({warnings[0].path}: {warnings[0].message})" if warnings else ""
        raise InputError(f"no log, config or stack dump file found in {', '.join(paths)}{why}")
    scanner = scanner_for(kb)
    scans: list[FileScan] = []
    parsed: list[BaseFact] = []
    # Read in the order that suits the reader (archive members in archive order), then used in
    # name order: the member order of an archive must not change a byte of the output.
    results = list(zip(sources, map(_kept, tracked(sources, read_sources(sources, kb, scanner, jobs))), strict=True))
    results.sort(key=lambda item: _name_order(item[0]))
    sources = [source for source, _result in results]
    for _source, (scan, extra, notes) in results:
        warnings.extend(notes)
        parsed.extend(extra)
        if scan is not None:
            scans.append(scan)
    del results
    # Only the files with stack dumps are opened again.
    dumps = {scan.path for scan in scans if scan.stack_headers}
    stacks = stack_facts(kb, {s.display: s for s in sources if s.display in dumps}, scans, warnings)
    if one_run and (split := different_runs(paths, _config_facts(scans, parsed))) is not None:
        raise InputError(f"{split}; diagnose them one at a time (or with `rltriage batch`), or pass --same-run if they are one run")
    facts = _facts(run_facts(mode, scans, len(sources)), stacks, scans, parsed, settings or {})
    kept = sources if details else None
    del sources
    inference = get_engine(engine).run(kb.program, facts)
    del parsed
    warnings.extend(Warning(path, message) for path, message in slow.notes)
    ranking = rank(kb, inference)
    diagnosis = build_diagnosis(kb, scans, inference, ranking, warnings, mode)
    diagnosis = finish_model(diagnosis, redact)
    return Analysis(kb, scans, inference.asserted_facts(), inference, ranking, diagnosis, warnings, kept, redact)


def _facts(
    run: Iterable[BaseFact], stacks: Iterable[BaseFact], scans: Sequence[FileScan], parsed: Iterable[BaseFact], settings: Mapping[str, object]
) -> Iterator[BaseFact]:
    """The facts asserted, in their order, made as the engine takes them: the engine keeps its own
    numbered copy of each (sharing its fields), and a folder of 100,000 files would otherwise hold
    a second list of them all through inference. A config value given on the command line replaces
    the config's and the logs'."""
    facts = chain(run, stacks, chain.from_iterable(chain(hit_facts(s), echo_facts(s), failure_facts(s)) for s in scans), parsed)
    for fact in facts:
        if not (settings and fact.type == "config" and fact.fields.get("name") in settings):
            yield fact
    for name, value in sorted(settings.items()):
        yield BaseFact("config", {"key": name, "name": name, "value": value, "path": "<command line>", "line": 1, "source": "file"})


def _config_facts(scans: Sequence[FileScan], parsed: Iterable[BaseFact]) -> Iterator[BaseFact]:
    """The config values the logs echo and the config files give, for `different_runs`."""
    yield from chain.from_iterable(echo_facts(scan) for scan in scans)
    yield from parsed


def _knowledge_base(kb: KnowledgeBase | None, rules_dirs: Iterable[str | os.PathLike[str]]) -> KnowledgeBase | None:
    rules_dirs = list(rules_dirs)
    if kb is not None and rules_dirs:
        raise ValueError("give either kb= (a loaded knowledge base) or rules_dirs=, not both")
    return kb


def diagnose(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kb: KnowledgeBase | None = None,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    stdin: BinaryIO | None = None,
    redact: bool = True,
) -> Diagnosis:
    """Diagnose a run from its logs. Never prints and never exits; secrets are redacted unless asked.

    `kb` is a knowledge base from `load_knowledge_base(...)`, loaded once and reused across calls;
    without it the built-in one (plus `rules_dirs`) is loaded (and cached).
    Raises InputError for a missing path, KnowledgeBaseError for invalid rule packs.
    """
    kb = _knowledge_base(kb, rules_dirs)
    return analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, stdin=stdin, redact=redact, kb=kb, details=False).diagnosis


def preflight(
    paths: Sequence[str | os.PathLike[str]],
    *,
    kb: KnowledgeBase | None = None,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    redact: bool = True,
) -> Diagnosis:
    """Check a config (and optional environment report) against the knowledge base's contracts."""
    kb = _knowledge_base(kb, rules_dirs)
    return analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, mode="preflight", redact=redact, kb=kb, details=False).diagnosis


def report(
    paths: Sequence[str | os.PathLike[str]],
    fmt: str = "html",
    *,
    kb: KnowledgeBase | None = None,
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
    kb = _knowledge_base(kb, rules_dirs)
    analysis = analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, engine=engine, stdin=stdin, redact=redact, kb=kb)
    return format_diagnosis(analysis.diagnosis, fmt, analysis.kb, details=analysis.details)


def render(diagnosis: Diagnosis, fmt: str = "text", *, kb: KnowledgeBase | None = None) -> str:
    """A diagnosis already in hand, in one of FORMATS. An html page made from a diagnosis alone has
    the six sections but no timeline and no excerpts (they need the logs: use `report`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    return format_diagnosis(diagnosis, fmt, kb or load_knowledge_base())
