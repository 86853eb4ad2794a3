"""Round 2: a library that loads many private rule packs in turn (a service diagnosing for many
teams) keeps a bounded number of knowledge bases: a pack that changed replaces its old entry, an
evicted knowledge base (with its scanner and templates) is freed, and memory stays under the bound."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

from .bounds import in_child, report

LOG = "starting\n[rltriage] stage=first_generation_started step=0\nlab-mark 1\n"
SIGNATURE = """id: lab.mark{i}
title: the lab's marker line {i}
source: test
pattern: 'lab-mark (?P<n>\\d+)(?: {i})?'
values: {{n: int}}
examples:
  match: ['lab-mark 1']
  no_match: ['nothing here']
"""
RULE = """id: lab.rule{i}
title: the lab's marker was seen ({i})
role: evidence
source: test
bucket: cluster_infra
issue: x
reason: y
when: {{all: [{{hit: lab.mark{i}}}]}}
then: {{evidence: {{weight: 0.5}}}}
fix: "marker {{{{ _0.n }}}} of pack {i}"
"""


def make_pack(root: Path, i: int, version: int = 0) -> Path:
    for folder in ("signatures", "rules"):
        (root / folder / "lab").mkdir(parents=True, exist_ok=True)
    (root / "signatures" / "lab" / f"mark{i}.yaml").write_text(SIGNATURE.format(i=i))
    (root / "rules" / "lab" / f"rule{i}.yaml").write_text(RULE.format(i=i).replace("title: the", f"title: v{version} the"))
    return root


def test_200_private_packs_loaded_in_turn_stay_under_the_bound(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(LOG)
    packs = [make_pack(tmp_path / f"pack{i}", i) for i in range(200)]

    def call() -> int:
        from rltriage.kb import load
        from rltriage.pipeline.run import analyse

        for i, pack in enumerate(packs):
            kb = load.load_knowledge_base([str(pack)], include_builtin=False)
            causes = analyse([str(log)], kb=kb).diagnosis.causes
            assert [c.rule for c in causes] == [f"lab.rule{i}"], causes
        assert len(load._loaded) == load.MAX_LOADED
        return 0

    outcome = in_child(call, seconds=240).check(0, 240)
    report("200 private packs in turn", outcome)


def test_a_changed_pack_replaces_its_entry_and_evicted_ones_are_freed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(LOG)
    changing = make_pack(tmp_path / "changing", 0)
    others = [make_pack(tmp_path / f"pack{i}", i) for i in range(1, 11)]

    def call() -> int:
        from rltriage.kb import load
        from rltriage.pipeline.run import analyse

        freed: list[weakref.ref[object]] = []
        for version in range(3):  # the same pack, changed twice: one entry, the old ones freed
            make_pack(changing, 0, version)
            stamp = 1_000_000_000 + version
            for path in changing.rglob("*.yaml"):
                os.utime(path, (stamp, stamp))
            kb = load.load_knowledge_base([str(changing)])
            assert next(r for r in kb.rules if r.id == "lab.rule0").model.title.startswith(f"v{version} ")
            analyse([str(log)], kb=kb)
            freed.append(weakref.ref(kb))
            del kb
        assert sum(1 for key in load._loaded if str(changing.resolve()) in key) == 1
        for pack in others:  # more packs than the cache holds: the oldest are evicted
            analyse([str(log)], kb=load.load_knowledge_base([str(pack)]))
            freed.append(weakref.ref(load.load_knowledge_base([str(pack)])))
        gc.collect()
        alive = [ref for ref in freed if ref() is not None]
        assert len(load._loaded) == load.MAX_LOADED and len(alive) == load.MAX_LOADED, (len(load._loaded), len(alive))
        return 0

    outcome = in_child(call, seconds=240).check(0, 240)
    report("changed and evicted packs", outcome)
