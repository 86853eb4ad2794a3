"""The stages wired together: inputs → scan → facts → infer → rank → render."""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from . import __version__
from .errors import InputError
from .facts import (
    WELL_KNOWN_CONFIG_KEYS,
    config_file_facts,
    echo_facts,
    env_report_facts,
    hit_facts,
    numbered_lines,
    run_facts,
)
from .infer import BaseFact, Fact, Inference, get_engine
from .inputs import MAX_PARSED_FILE, SNIFF_BYTES, Source, Warning, classify, discover, looks_binary, sort_key
from .load import KnowledgeBase, load_knowledge_base
from .progress import tracked
from .rank import RankedCause, Ranking, rank
from .redact import redact_model
from .render import ConfigView, render_fix, render_string, template_context
from .result import (
    Boundary,
    Cause,
    Diagnosis,
    Evidence,
    InputSummary,
    PatchPlanStep,
    ToolInfo,
    UnexplainedLine,
    Warning_,
)
from .scan import FileScan, Scanner, extract
from .stacks import Frame, ThreadStack, odd_one_out, parse_dumps, read_blocks
from .vocabulary import STALL_BUCKETS, InputKind, PatchKind, Stage, Symptom

SUCCESS_CRITERIA = (
    "first GRPO step completes",
    "progress advances beyond 0%",
    "step time is logged",
    "reward pipeline runs at least once",
)


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


_scanners: dict[int, Scanner] = {}
_worker_lock = threading.Lock()
_scanner_lock = threading.Lock()


def config_keys(kb: KnowledgeBase) -> list[str]:
    keys = set(WELL_KNOWN_CONFIG_KEYS)
    for loaded in kb.rules:
        for section in (loaded.model.when.all, loaded.model.when.any, loaded.model.when.none):
            for pattern in section:
                if pattern.fact == "config":
                    for name in ("key", "name"):
                        value = pattern.where.get(name)
                        if isinstance(value, str):
                            keys.add(value)
                        elif isinstance(value, list):
                            keys.update(v for v in value if isinstance(v, str))
                        elif value is not None and getattr(value, "matches", None):
                            literal = re.sub(r"^\(\^\|\\\.\)|\$$", "", str(value.matches))  # type: ignore[union-attr]
                            if re.fullmatch(r"(?:[\w]|\\\.)+", literal):
                                keys.add(literal.replace("\\.", "."))
    return sorted(keys)


def scanner_for(kb: KnowledgeBase) -> Scanner:
    with _scanner_lock:
        scanner = _scanners.get(id(kb))
        if scanner is None:
            scanner = Scanner(kb, config_keys(kb))
            _scanners[id(kb)] = scanner
        return scanner


class _Rejoined(io.RawIOBase):
    """A stream that gives back the bytes already read for classification, then the rest."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:  # type: ignore[override]
        size = -1 if size is None else size
        if self._head:
            out, self._head = (self._head, b"") if size < 0 or size >= len(self._head) else (self._head[:size], self._head[size:])
            return out
        return self._rest.read(size)


def read_source(source: Source, scanner: Scanner, warnings: list[Warning]) -> tuple[FileScan | None, list[BaseFact]]:
    try:
        stream = source.open()
    except OSError as exc:
        warnings.append(Warning(source.display, f"skipped: {exc.strerror or exc}"))
        return None, []
    with stream:
        try:
            head = stream.read(SNIFF_BYTES)
        except OSError as exc:
            warnings.append(Warning(source.display, f"skipped: {exc.strerror or exc}"))
            return None, []
        if not head:
            warnings.append(Warning(source.display, "empty file"))
            return FileScan(source.display, classify(source, head)), []
        if looks_binary(head):
            warnings.append(Warning(source.display, "skipped: binary content"))
            return None, []
        kind = classify(source, head)
        rejoined = _Rejoined(head, stream)
        facts: list[BaseFact] = []
        notes: list[str] = []
        try:
            if kind is InputKind.config:
                data = head + stream.read(MAX_PARSED_FILE)
                facts = config_file_facts(source.display, data, notes)
                scan = FileScan(source.display, kind, lines=data.count(b"\n"))
            elif kind is InputKind.env_report:
                lines = list(numbered_lines(rejoined, MAX_PARSED_FILE))
                facts = env_report_facts(source.display, lines)
                scan = FileScan(source.display, kind, lines=len(lines))
            else:
                scan = scanner.scan(source.display, kind, rejoined)
        except (OSError, EOFError, ValueError) as exc:
            warnings.append(Warning(source.display, f"read stopped early: {exc}"))
            return None, facts
        for note in [*notes, *scan.warnings]:
            warnings.append(Warning(source.display, note))
        return scan, facts


# What forked workers inherit instead of receiving it pickled (sources hold open functions).
_worker_state: tuple[KnowledgeBase, list[Source]] | None = None


def _read_in_worker(index: int) -> tuple[FileScan | None, list[BaseFact], list[Warning]]:
    assert _worker_state is not None
    kb, sources = _worker_state
    notes: list[Warning] = []
    scan, facts = read_source(sources[index], scanner_for(kb), notes)
    return scan, facts, notes


def read_sources(
    sources: list[Source], kb: KnowledgeBase, scanner: Scanner, jobs: int
) -> Iterator[tuple[FileScan | None, list[BaseFact], list[Warning]]]:
    """Read every source, in order; with jobs > 1, in forked worker processes (the GIL would
    serialise threads), each inheriting the compiled knowledge base."""
    import multiprocessing

    if jobs <= 1 or len(sources) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for source in sources:
            notes: list[Warning] = []
            scan, facts = read_source(source, scanner, notes)
            yield scan, facts, notes
        return
    global _worker_state
    from concurrent.futures import ProcessPoolExecutor

    with _worker_lock:
        _worker_state = (kb, sources)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            yield from pool.map(_read_in_worker, range(len(sources)), chunksize=max(1, len(sources) // (jobs * 8)))
        _worker_state = None


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
    facts.extend(parsed)
    inference = get_engine(engine).run(kb.program, facts)
    ranking = rank(kb, inference)
    diagnosis = build_diagnosis(kb, scans, inference, ranking, warnings, mode)
    if redact:
        diagnosis = redact_model(diagnosis)
    return Analysis(kb, scans, facts, inference, ranking, diagnosis, warnings)


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


def _timestamps(scans: list[FileScan]) -> dict[tuple[str, int], float]:
    stamps: dict[tuple[str, int], float] = {}
    for scan in scans:
        for tally in scan.tallies.values():
            for record in (tally.first, *tally.samples, tally.last):
                if record is not None and record.timestamp is not None:
                    stamps[(scan.path, record.line)] = record.timestamp
    return stamps


MAX_STACK_PROOF = 3


def _stack_proof(inference: Inference) -> list[Evidence]:
    """Where the stuck threads are, from hang-time dumps: the odd process first, then one main
    thread per process."""
    proof: list[Evidence] = []
    for fact in inference.facts_of("stack_outlier"):
        proof.extend(fact.evidence)
    seen = {e.path for e in proof}
    for fact in inference.facts_of("stack"):
        if fact.get("dump") == "traceback" or fact.get("path") in seen:
            continue
        seen.add(str(fact.get("path")))
        proof.extend(fact.evidence)
    return proof[:MAX_STACK_PROOF]


def _boundary(ranking: Ranking, scans: list[FileScan], inference: Inference) -> Boundary:
    fact = ranking.boundary
    if fact is None:
        return Boundary(evidence=_stack_proof(inference))
    last = fact.get("last_completed")
    missing = fact.get("first_missing")
    evidence = list(fact.evidence) + _stack_proof(inference)
    silent = None
    if evidence:
        stamps = _timestamps(scans)
        stamped = [(stamps[(e.path, e.line)], e.path) for e in evidence if (e.path, e.line) in stamps]
        if stamped:
            start, path = max(stamped)
            end = next((s.last_timestamp for s in scans if s.path == path), None)
            if end is not None and end >= start:
                silent = round(end - start, 1)
    return Boundary(
        last_completed=Stage(last) if last else None,
        first_missing=Stage(missing) if missing else None,
        evidence=evidence,
        silent_seconds=silent,
    )


def _cause(kb: KnowledgeBase, ranked: RankedCause, facts: list[Fact], warnings: list[Warning]) -> Cause:
    loaded = kb.rule(ranked.rule)
    assert loaded is not None
    context = template_context(ranked.bindings, facts)
    try:
        fix = render_fix(kb, loaded, context)
        steps = [
            PatchPlanStep(kind=step.kind, target=render_string(kb, step.target, context), change=render_string(kb, step.change, context))
            for step in loaded.model.patch_plan
        ]
    except Exception as exc:  # noqa: BLE001 - a broken template must not lose the diagnosis
        warnings.append(Warning(loaded.origin.display, f"fix template failed to render: {exc}"))
        fix = loaded.model.fix or loaded.model.title
        steps = []
    return Cause(
        rule=ranked.rule,
        bucket=ranked.bucket,
        score=ranked.score,
        title=ranked.title,
        evidence=ranked.evidence,
        fix=fix,
        patch_plan=steps,
        blocking=ranked.blocking,
    )


def stack_facts(kb: KnowledgeBase, sources: dict[str, Source], scans: list[FileScan], warnings: list[Warning]) -> list[BaseFact]:
    """Facts from the stack dumps and tracebacks the scanner saw: frame-signature hits, each main
    thread's stack, and the process that is not doing what all the others do."""
    frame_signatures = [s for s in kb.signatures.values() if s.model.scope == "frame"]
    stacks: list[ThreadStack] = []
    texts: dict[tuple[str, int], str] = {}
    kinds: dict[str, str] = {}
    for scan in scans:
        source = sources.get(scan.path)
        if not scan.stack_headers or source is None:
            continue
        try:
            with source.open() as stream:
                numbered = read_blocks(stream, scan.stack_headers)
        except OSError as exc:
            warnings.append(Warning(scan.path, f"stack dump could not be re-read: {exc}"))
            continue
        texts.update(((scan.path, number), text) for number, text in numbered)
        kinds[scan.path] = scan.kind.value
        stacks.extend(parse_dumps(scan.path, numbered, scan.stack_headers))
    facts: list[BaseFact] = []
    for stack in stacks:
        stack_id = f"{stack.path}:{stack.header_line}:{stack.thread}"

        def evidence(frame: Frame, label: str, path: str = stack.path) -> Evidence:
            return Evidence(path=path, line=frame.log_line, text=texts.get((path, frame.log_line), frame.text), signature=label)

        common = {"path": stack.path, "process": stack.process, "thread": stack.thread, "main": stack.main, "stack": stack_id, "dump": stack.kind, "state": stack.state}
        top = stack.frames[0]
        if stack.main:
            fields = {**common, "kind": kinds.get(stack.path), "top": top.text, "depth": len(stack.frames), "line": top.log_line}
            facts.append(BaseFact("stack", fields, (evidence(top, f"stack:{stack.kind}"),)))
        for sig in frame_signatures:
            for depth, frame in enumerate(stack.frames):
                match = sig.regex.search(frame.text)
                if match is None:
                    continue
                fields = dict(extract(sig, match))
                fields.update(common)
                fields.update(signature=sig.id, kind=kinds.get(stack.path), count=1, line=frame.log_line, text=frame.text, rank=None, ranks=0, timestamp=None, depth=depth)
                facts.append(BaseFact("hit", fields, (evidence(frame, sig.id),)))
                break  # the innermost frame a signature matches says where the thread is
    outlier = odd_one_out(stacks)
    if outlier is not None:
        odd = outlier.stack
        fields = {
            "path": odd.path, "process": odd.process, "thread": odd.thread, "top": odd.frames[0].text, "line": odd.frames[0].log_line,
            "majority_top": outlier.majority[0] if outlier.majority else "", "majority_count": outlier.majority_count, "total": outlier.total,
        }
        ev = Evidence(path=odd.path, line=odd.frames[0].log_line, text=texts.get((odd.path, odd.frames[0].log_line), odd.frames[0].text), signature="stack:outlier")
        facts.append(BaseFact("stack_outlier", fields, (ev,)))
    return facts


# The first-step debugger's smoke-test reduction: (concept, keys the trainers use for it, new value).
SMOKE_REDUCTION: tuple[tuple[str, tuple[str, ...], object], ...] = (
    ("num_generations", ("num_generations", "rollout.n", "group_size", "n_samples_per_prompt"), 2),
    ("max_completion_length", ("max_completion_length", "max_response_length", "max_tokens", "generate_max_len"), 128),
    ("per_device_train_batch_size", ("per_device_train_batch_size", "train_batch_size", "rollout_batch_size", "batch_per_replica"), 2),
    ("gradient_accumulation_steps", ("gradient_accumulation_steps",), 1),
    ("max_steps", ("max_steps", "total_training_steps", "num_steps"), 1),
    ("eval_strategy", ("eval_strategy", "evaluation_strategy", "test_freq", "val_before_train"), "no"),
)


def smoke_test_plan(facts: list[Fact]) -> list[PatchPlanStep]:
    """The smoke-test reduction written with the keys this run really uses."""
    config = ConfigView([f for f in facts if f.type == "config"])
    steps = []
    for concept, keys, value in SMOKE_REDUCTION:
        key = next((k for k in keys if config.has(k)), None)
        if key is None:
            if concept in ("num_generations", "max_completion_length", "max_steps"):
                steps.append(PatchPlanStep(kind=PatchKind.config, target=concept, change=f"set to {value}"))
            continue
        current = config.get(key)
        if str(current) == str(value):
            continue
        where = config.at(key)
        steps.append(PatchPlanStep(kind=PatchKind.config, target=config.key(key), change=f"{current} -> {value}" + (f" ({where})" if where else "")))
    smoke_keys = {key for _concept, keys, _value in SMOKE_REDUCTION for key in keys}
    config_files = sorted(
        {
            str(f.get("path"))
            for f in facts
            if f.type == "config" and f.get("source") == "file" and any(str(f.get("key")).endswith(k) for k in smoke_keys)
        }
    )
    for path in config_files[:1]:
        stem, dot, suffix = path.rpartition(".")
        smoke_path = f"{stem}.smoke.{suffix}" if dot else f"{path}.smoke"
        steps.append(PatchPlanStep(kind=PatchKind.command, target=path, change=f"rltriage smoke {path} -o {smoke_path} (writes the reduction with the batch contracts kept)"))
    if not config_files:
        steps.append(PatchPlanStep(kind=PatchKind.command, target="the run's config", change="rltriage smoke CONFIG -o CONFIG.smoke.yaml (writes the reduction with the batch contracts kept)"))
    steps.append(PatchPlanStep(kind=PatchKind.file, target="training dataset", change="limit to 1 prompt (e.g. dataset.select(range(1)))"))
    steps.append(PatchPlanStep(kind=PatchKind.file, target="reward functions", change="replace remote or heavy rewards with a cheap local stub (e.g. lambda completions, **kw: [0.0] * len(completions))"))
    return steps


MAX_UNEXPLAINED_REPORTED = 15


def unexplained_lines(scans: list[FileScan]) -> list[UnexplainedLine]:
    """Failure-looking lines the knowledge base does not explain, most frequent first."""
    merged: dict[str, UnexplainedLine] = {}
    for scan in scans:
        for template, item in scan.unexplained.items():
            known = merged.get(template)
            if known is None:
                evidence = Evidence(path=scan.path, line=item.line, text=item.text, signature="unexplained")
                merged[template] = UnexplainedLine(template=template, count=item.count, evidence=evidence)
            else:
                merged[template] = known.model_copy(update={"count": known.count + item.count})
    ranked = sorted(merged.values(), key=lambda u: (-u.count, u.template))
    return ranked[:MAX_UNEXPLAINED_REPORTED]


def build_diagnosis(
    kb: KnowledgeBase, scans: list[FileScan], inference: Inference, ranking: Ranking, warnings: list[Warning], mode: str = "diagnose"
) -> Diagnosis:
    facts = inference.facts
    causes = [_cause(kb, c, facts, warnings) for c in ranking.causes]
    preflight = mode == "preflight"
    if preflight:
        # Nothing ran yet: there is no symptom and no boundary, only contracts the config breaks.
        ranking = Ranking(ranking.causes, Symptom.none, causes[0].bucket if causes else None, ranking.suppressed, None)
    verification: list[str] = []
    if not preflight and (ranking.symptom in (Symptom.hang, Symptom.slow) or ranking.primary_bucket in STALL_BUCKETS):
        verification.extend(SUCCESS_CRITERIA)
    if causes:
        top = kb.rule(causes[0].rule)
        if top is not None:
            context = template_context(ranking.causes[0].bindings, facts)
            for line in top.model.verify:
                try:
                    verification.append(render_string(kb, line, context))
                except Exception as exc:  # noqa: BLE001
                    warnings.append(Warning(top.origin.display, f"verify line failed to render: {exc}"))
    verification = list(dict.fromkeys(verification))
    smoke = smoke_test_plan(facts) if ranking.symptom in (Symptom.hang, Symptom.slow) else []
    inputs = [InputSummary(path=s.path, kind=s.kind, lines=s.lines) for s in scans]
    unexplained = unexplained_lines(scans)
    return Diagnosis(
        tool=ToolInfo(version=__version__),
        mode="preflight" if preflight else "diagnose",
        inputs=inputs,
        symptom=ranking.symptom,
        primary_bucket=ranking.primary_bucket,
        boundary=_boundary(ranking, scans, inference),
        causes=causes,
        verification=verification,
        smoke_test=smoke,
        unexplained=unexplained,
        suppressed=ranking.suppressed,
        warnings=[Warning_(path=w.path, message=w.message) for w in warnings],
    )

