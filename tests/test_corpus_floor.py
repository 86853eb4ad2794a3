"""Regression guard on the real-world corpus: the diagnosis of real logs must not get worse.

When the shared corpus is beside the repository (`../shared/corpus/real`, skipped when absent), every
case is diagnosed through the public API and scored as `shared/tools/score.py --inprocess` scores it:

- top1_acceptable: the primary bucket is the case's expected bucket or one it also accepts;
- top3: the expected bucket is among the buckets of the first three distinct causes (or, for an
  expected `none`, the primary bucket is `none`);
- evidence_recall: the share of the cases' `key_evidence` lines found in the cited evidence (a key
  line contained in a cited text, or a cited text longer than 20 characters contained in it).

Each must stay at or above its floor in `tests/corpus_floor.json`, set a few points below the numbers
measured when it was written: raise the floors when the diagnosis improves, never lower them to
make a change pass.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

import rltriage
from rltriage import Diagnosis

from .conftest import REPO

CORPUS = REPO.parent / "shared" / "corpus" / "real"
FLOORS = REPO / "tests" / "corpus_floor.json"


def _cases() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if (p / "case.yaml").is_file())


def _evidence_texts(d: Diagnosis) -> list[str]:
    texts = [str(e.text) for e in d.boundary.evidence]
    for cause in d.causes:
        texts.extend(str(e.text) for e in cause.evidence)
    return texts


def score(cases: list[Path]) -> tuple[dict[str, float], list[str]]:
    """The three metrics in percent, and one line per case that missed one of them."""
    yaml = YAML(typ="safe")
    n = top1 = top3 = hits = keys = 0
    misses: list[str] = []
    for folder in cases:
        case = yaml.load((folder / "case.yaml").read_text(encoding="utf-8"))
        expected = case.get("expected_bucket")
        acceptable = {expected, *(case.get("also_acceptable") or [])}
        inputs = [str(folder / name) for name in sorted(os.listdir(folder)) if name != "case.yaml"]
        d = rltriage.diagnose(inputs)
        primary = d.primary_bucket.value if d.primary_bucket else "none"
        buckets: list[str] = []
        for cause in d.causes:
            if cause.bucket.value not in buckets:
                buckets.append(cause.bucket.value)
        n += 1
        ok1 = primary in acceptable
        ok3 = expected in buckets[:3] or (expected == "none" and primary == "none")
        top1 += ok1
        top3 += ok3
        texts = _evidence_texts(d)
        found = 0
        wanted = case.get("key_evidence") or []
        for key in wanted:
            line = key["text"] if isinstance(key, dict) else str(key)
            found += any(line in t or (len(t) > 20 and t in line) for t in texts)
        hits += found
        keys += len(wanted)
        if not ok1 or not ok3 or found < len(wanted):
            misses.append(f"{folder.name}: expected {expected}, primary {primary}, top3 {buckets[:3]}, evidence {found}/{len(wanted)}")
    metrics = {
        "top1_acceptable": 100.0 * top1 / n if n else 0.0,
        "top3": 100.0 * top3 / n if n else 0.0,
        "evidence_recall": 100.0 * hits / keys if keys else 0.0,
    }
    return metrics, misses


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not beside the repository")
def test_the_corpus_scores_stay_above_their_floors() -> None:
    floors = json.loads(FLOORS.read_text(encoding="utf-8"))
    cases = _cases()
    assert len(cases) >= floors["min_cases"], f"only {len(cases)} corpus cases found in {CORPUS}"
    metrics, misses = score(cases)
    dropped = {name: (round(metrics[name], 1), floor) for name, floor in floors["floors"].items() if metrics[name] < floor}
    assert not dropped, (
        f"corpus metrics below their floors (now, floor): {dropped}; all now: "
        + ", ".join(f"{k}={v:.1f}" for k, v in metrics.items())
        + "\n"
        + "\n".join(misses)
    )


def test_the_floors_file_names_the_three_metrics() -> None:
    floors = json.loads(FLOORS.read_text(encoding="utf-8"))
    assert set(floors["floors"]) == {"top1_acceptable", "top3", "evidence_recall"}
    assert all(0 < value <= 100 for value in floors["floors"].values())
