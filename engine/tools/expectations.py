"""Fixture runs and signature examples checked through the real pipeline (`rules test`, the test suite)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import Problem
from ..base.vocabulary import InputKind
from ..kb.fixtures import fixture_name, read_expectation, run_inputs
from ..kb.knowledge import CompiledSignature, KnowledgeBase
from ..kb.models import FixtureExpectation
from ..pipeline.render import render_report
from ..pipeline.run import Analysis, analyse
from ..pipeline.scan import extract, scanner_for


@dataclass(frozen=True)
class Outcome:
    name: str
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures


def check_fixture(folder: Path, kb: KnowledgeBase, engine: str = "default") -> tuple[Outcome, Analysis | None]:
    name = fixture_name(folder)
    try:
        expect = read_expectation(folder)
    except ValueError as exc:
        return Outcome(name, (str(exc),)), None
    analysis = analyse(run_inputs(folder), kb=kb, engine=engine, mode=expect.mode)
    return Outcome(name, tuple(compare(expect, analysis))), analysis


def _cited(analysis: Analysis) -> list[tuple[str, int]]:
    d = analysis.diagnosis
    pairs = [(e.path, e.line) for e in d.boundary.evidence]
    for cause in d.causes:
        pairs.extend((e.path, e.line) for e in cause.evidence)
    return pairs


def compare(expect: FixtureExpectation, analysis: Analysis) -> list[str]:
    d = analysis.diagnosis
    failures = []
    ranked = [c.rule for c in d.causes]
    if expect.symptom is not None and d.symptom != expect.symptom:
        failures.append(f"symptom is {d.symptom.value}, expected {expect.symptom.value}")
    if expect.primary_bucket is not None:
        wanted = None if expect.primary_bucket == "none" else getattr(expect.primary_bucket, "value", expect.primary_bucket)
        got = d.primary_bucket.value if d.primary_bucket else None
        if got != wanted:
            failures.append(f"primary bucket is {got}, expected {wanted}")
    if expect.first_cause is not None and (not ranked or ranked[0] != expect.first_cause):
        failures.append(f"first cause is {ranked[0] if ranked else None}, expected {expect.first_cause} (ranking: {ranked[:5]})")
    for rule in expect.top3:
        if rule not in ranked[:3]:
            failures.append(f"{rule} is not in the top three (ranking: {ranked[:5]})")
    for stage_name, got_stage, label in (
        (expect.boundary_last, d.boundary.last_completed, "last completed stage"),
        (expect.boundary_missing, d.boundary.first_missing, "first missing stage"),
    ):
        if stage_name is not None:
            wanted_value = None if stage_name == "none" else getattr(stage_name, "value", stage_name)
            if (got_stage.value if got_stage else None) != wanted_value:
                failures.append(f"{label} is {got_stage.value if got_stage else None}, expected {wanted_value}")
    cited = _cited(analysis)
    for cite in expect.cites:
        file_part, _, line_part = cite.rpartition(":")
        if not any((p == file_part or p.endswith("/" + file_part) or p.endswith("!" + file_part)) and str(line) == line_part for p, line in cited):
            failures.append(f"{cite} is not cited")
    fired = {f.rule for f in analysis.inference.firings}
    for rule in expect.fires:
        if rule not in fired:
            failures.append(f"{rule} did not fire")
    for rule in expect.not_fires:
        if rule in fired:
            failures.append(f"{rule} fired but must not")
    collected = [c.id for c in d.collect]
    for item in expect.collect:
        if item not in collected:
            failures.append(f"{item} is not among the evidence to collect next ({collected})")
    if expect.collect_first is not None and (not collected or collected[0] != expect.collect_first):
        failures.append(f"first evidence to collect is {collected[0] if collected else None}, expected {expect.collect_first}")
    if expect.report_contains:
        report = render_report(analysis.kb, d, "text")
        for text in expect.report_contains:
            if text not in report:
                failures.append(f"report does not contain {text!r}")
    return failures


def check_signature_examples(sig: CompiledSignature, kb: KnowledgeBase) -> list[Problem]:
    """Every match example must match with its values; no no_match example may match."""
    scanner = scanner_for(kb)
    problems: list[Problem] = []
    origin = sig.origin

    def hits(line: str, kind: InputKind) -> list[dict[str, object]]:
        if sig.model.scope == "frame":
            try:
                match = sig.regex.search(line.strip())
            except TimeoutError:
                return []
            return [extract(sig, match)] if match else []
        scan = scanner.scan("example", kind, io.BytesIO(line.encode("utf-8") + b"\n"))
        return [dict(t.first.values) for t in scan.tallies.values() if t.signature == sig.id and t.first is not None]

    default_kind = sig.model.kinds[0] if sig.model.kinds else InputKind.driver_log
    for index, example in enumerate(sig.model.examples.match):
        found = hits(example.line, example.kind or default_kind)
        line, col = origin.at("examples", "match", index)
        if not found:
            problems.append(Problem(origin.display, line, col, "example-no-match", "match example is not matched by the signature"))
            continue
        values = found[0]
        for name, expected in example.values.items():
            got = values.get(name)
            if got != expected and str(got) != str(expected):
                problems.append(Problem(origin.display, line, col, "example-value", f"group '{name}' extracted {got!r}, expected {expected!r}"))
    for index, text in enumerate(sig.model.examples.no_match):
        if hits(text, default_kind):
            line, col = origin.at("examples", "no_match", index)
            problems.append(Problem(origin.display, line, col, "example-matches", "no_match example is matched by the signature"))
    return problems
