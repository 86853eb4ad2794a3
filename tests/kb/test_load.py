"""Loading: packs are validated, compiled and cached; a changed pack is loaded again."""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from pathlib import Path

import pytest

import rltriage
from rltriage.kb import load
from rltriage.kb.load import builtin_pack, load_knowledge_base
from rltriage.pipeline.run import analyse

SIGNATURE = """\
id: lab.disk_full
title: Disk full
source: test
pattern: 'No space left on device: (?P<target>/\\S+)'
examples:
  match: ['OSError: No space left on device: /ckpt/x']
  no_match: ['plenty of space']
"""
RULE = """\
id: lab.disk_full
title: The disk is full
role: evidence
source: test
bucket: cluster_infra
when:
  all:
    - hit: lab.disk_full
then:
  evidence:
    weight: 0.8
fix: free space
"""


def _pack(root: Path, rule: str = RULE) -> Path:
    (root / "signatures" / "lab").mkdir(parents=True)
    (root / "rules" / "lab").mkdir(parents=True)
    (root / "signatures" / "lab" / "disk_full.yaml").write_text(SIGNATURE)
    (root / "rules" / "lab" / "disk_full.yaml").write_text(rule)
    return root


def test_the_shipped_pack_loads_compiled() -> None:
    kb = rltriage.load_knowledge_base()
    assert builtin_pack() in kb.packs
    assert len(kb.rules) > 150 and len(kb.signatures) > 150
    assert kb.program is not None and len(kb.program.rules) == len(kb.rules)
    assert [r.id for r in kb.rules] == sorted(r.id for r in kb.rules)
    assert kb.rule("trl.reward_never_returned") is not None and kb.rule("no.such") is None


def test_a_pack_is_cached_until_it_changes(tmp_path: Path) -> None:
    pack = _pack(tmp_path / "pack")
    first = load_knowledge_base([pack], include_builtin=False)
    assert load_knowledge_base([pack], include_builtin=False) is first
    rule = pack / "rules" / "lab" / "disk_full.yaml"
    rule.write_text(RULE.replace("weight: 0.8", "weight: 0.5"))
    later = time.time() + 5
    os.utime(rule, (later, later))
    second = load_knowledge_base([pack], include_builtin=False)
    assert second is not first
    assert second.rule("lab.disk_full").model.then.evidence.weight == 0.5  # type: ignore[union-attr]


def test_every_problem_is_reported_with_its_position(tmp_path: Path) -> None:
    broken = RULE.replace("bucket: cluster_infra", "bucket: cluster_infra\nseverity: high").replace("role: evidence\n", "")
    pack = _pack(tmp_path / "pack", broken)
    with pytest.raises(rltriage.KnowledgeBaseError) as caught:
        load_knowledge_base([pack], include_builtin=False)
    codes = sorted(p.code for p in caught.value.problems)
    assert codes == ["missing-key", "unknown-key"]
    unknown = next(p for p in caught.value.problems if p.code == "unknown-key")
    assert (unknown.line, unknown.col) == (5, 1) and unknown.path.endswith("disk_full.yaml")


def test_a_missing_pack_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(rltriage.KnowledgeBaseError, match="rules directory does not exist"):
        load_knowledge_base([tmp_path / "nope"])


def test_the_id_must_be_the_path(tmp_path: Path) -> None:
    pack = _pack(tmp_path / "pack")
    (pack / "rules" / "lab" / "disk_full.yaml").rename(pack / "rules" / "lab" / "other.yaml")
    with pytest.raises(rltriage.KnowledgeBaseError) as caught:
        load_knowledge_base([pack], include_builtin=False)
    assert [p.code for p in caught.value.problems] == ["id-path"]


def test_caches_live_on_the_knowledge_base() -> None:
    kb = rltriage.load_knowledge_base()
    built = []
    assert kb.cache.get("probe", lambda: built.append(1) or "value") == "value"
    assert kb.cache.get("probe", lambda: built.append(1) or "other") == "value"
    assert built == [1]


def test_pattern_traversal_covers_every_section() -> None:
    kb = rltriage.load_knowledge_base()
    sections = {section for loaded in kb.rules for section, _i, _p in loaded.model.when.patterns()}
    assert sections == {"all", "any", "none"}


MATCHING_RULE = RULE.replace("    - hit: lab.disk_full\n", "    - hit: lab.disk_full\n      as: full\n      where:\n        target: {matches: '^/ckpt/'}\n")


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process sees: no knowledge base loaded yet (the cache folder stays)."""
    monkeypatch.setattr(load, "_loaded", OrderedDict())


def test_a_pack_loaded_before_compiles_its_patterns_when_they_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLTRIAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLTRIAGE_NO_CACHE", raising=False)
    pack = _pack(tmp_path / "pack", MATCHING_RULE)
    log = tmp_path / "train.log"
    log.write_text("step 3\nOSError: No space left on device: /ckpt/step-3\n")
    _fresh_process(monkeypatch)
    first = load_knowledge_base([pack], include_builtin=False)
    assert first.signatures["lab.disk_full"].regex._compiled is not None  # the first load compiles and checks all
    _fresh_process(monkeypatch)
    second = load_knowledge_base([pack], include_builtin=False)
    assert second is not first
    pattern = second.signatures["lab.disk_full"].regex
    assert pattern._compiled is None
    assert second.program is not None
    check = next(c for r in second.program.rules for slot in r.slots for p in slot for c in p.checks if c.op == "matches")
    assert check.pattern is not None and check.pattern._compiled is None
    # Both are compiled when a run needs them, and diagnose as before.
    assert [c.rule for c in analyse([str(log)], kb=second).diagnosis.causes] == ["lab.disk_full"]
    assert pattern._compiled is not None and check.pattern._compiled is not None
    assert [c.rule for c in analyse([str(log)], kb=first).diagnosis.causes] == ["lab.disk_full"]


def test_a_pattern_changed_after_a_good_load_is_checked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLTRIAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLTRIAGE_NO_CACHE", raising=False)
    pack = _pack(tmp_path / "pack")
    _fresh_process(monkeypatch)
    load_knowledge_base([pack], include_builtin=False)
    signature = pack / "signatures" / "lab" / "disk_full.yaml"
    signature.write_text(SIGNATURE.replace("(?P<target>/\\S+)", "(?P<target>/\\S+").replace("examples:", "values: {size: int}\nexamples:"))
    for _attempt in range(2):  # and again: a pack that failed is never remembered as good
        _fresh_process(monkeypatch)
        with pytest.raises(rltriage.KnowledgeBaseError) as caught:
            load_knowledge_base([pack], include_builtin=False)
        problem = next(p for p in caught.value.problems if p.code == "bad-regex")
        assert problem.line == 4 and problem.path.endswith("disk_full.yaml")
    signature.write_text(SIGNATURE.replace("examples:", "values: {size: int}\nexamples:"))
    _fresh_process(monkeypatch)
    with pytest.raises(rltriage.KnowledgeBaseError) as caught:
        load_knowledge_base([pack], include_builtin=False)
    assert [p.code for p in caught.value.problems] == ["unknown-group"]
