"""Every lint error, produced by a broken sample file, with its exact `path:line:col` message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rltriage.tools.lint import lint

GOOD_SIGNATURE = """\
id: lab.disk_full
title: Disk full while writing a checkpoint
source: a public issue
pattern: 'No space left on device: (?P<dir>/\\S+)'
examples:
  match:
    - line: 'OSError: [Errno 28] No space left on device: /ckpt/step_10'
      values: {dir: /ckpt/step_10}
  no_match:
    - 'space left on device is 10 GiB'
"""

GOOD_RULE = """\
id: lab.disk_full
title: The checkpoint disk is full
source: a public issue
bucket: cluster_infra
issue: the run dies while saving
reason: the checkpoint volume is full
when:
  all:
    - hit: lab.disk_full
      as: disk
then:
  evidence:
    weight: 0.8
fix: "Free space under {{ disk.dir }}."
role: evidence
"""


def write(pack: Path, relative: str, text: str) -> Path:
    path = pack / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    write(tmp_path, "signatures/lab/disk_full.yaml", GOOD_SIGNATURE)
    write(tmp_path, "rules/lab/disk_full.yaml", GOOD_RULE)
    return tmp_path


def messages(pack: Path) -> list[str]:
    return [str(p) for p in lint([str(pack)], include_builtin=False)]


def test_good_pack_is_clean(pack: Path) -> None:
    assert messages(pack) == []


def test_unknown_key(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("bucket: cluster_infra", "bucket: cluster_infra\nseverity: high"))
    assert messages(pack) == [f"{path}:5:1: error[unknown-key]: severity: unknown key 'severity'"]


def test_missing_key(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("source: a public issue\n", ""))
    assert messages(pack) == [f"{path}:1:1: error[missing-key]: source: missing key 'source'"]


def test_bad_enum(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("bucket: cluster_infra", "bucket: disk"))
    found = messages(pack)
    assert len(found) == 1 and found[0].startswith(f"{path}:4:1: error[bad-enum]: bucket: Input should be 'rollout_hang'")


def test_id_not_matching_path(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("id: lab.disk_full", "id: lab.full_disk"))
    assert f"{path}:1:1: error[id-path]: id 'lab.full_disk' does not match its file path (expected 'lab.disk_full')" in messages(pack)


def test_duplicate_id_across_folders(pack: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("other")
    write(other, "signatures/lab/disk_full.yaml", GOOD_SIGNATURE)
    found = [str(p) for p in lint([str(pack), str(other)], include_builtin=False)]
    assert found == [f"{other}/signatures/lab/disk_full.yaml:1:1: error[duplicate-id]: id 'lab.disk_full' is already defined in {pack}/signatures/lab/disk_full.yaml"]


def test_unknown_signature_fact_and_template(pack: Path) -> None:
    rule = GOOD_RULE.replace("hit: lab.disk_full", "hit: lab.disk_fill").replace(
        'fix: "Free space under {{ disk.dir }}."', "fix_template: fixes/lab/none.md.j2"
    )
    rule = rule.replace("  all:\n", "  all:\n    - fact: gpu_state\n")
    path = write(pack, "rules/lab/disk_full.yaml", rule)
    found = messages(pack)
    assert f"{path}:9:7: error[unknown-fact]: no signature, pipeline stage or rule produces fact type 'gpu_state'" in found
    assert f"{path}:10:7: error[unknown-signature]: rule refers to unknown signature 'lab.disk_fill'" in found
    assert f"{path}:15:1: error[unknown-template]: template 'fixes/lab/none.md.j2' does not exist in any templates folder" in found


def test_orphan_signature(pack: Path) -> None:
    path = write(pack, "signatures/lab/oom_killer.yaml", GOOD_SIGNATURE.replace("lab.disk_full", "lab.oom_killer"))
    assert messages(pack) == [f"{path}:1:1: error[orphan-signature]: no rule uses signature 'lab.oom_killer'"]


def test_template_fails_with_strict_undefined(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("{{ disk.dir }}", "{{ disk.mount }}"))
    found = messages(pack)
    assert len(found) == 1
    assert found[0].startswith(f"{path}:14:1: error[template]: does not render with the rule's fields: UndefinedError:")


def test_regex_that_does_not_compile(pack: Path) -> None:
    path = write(pack, "signatures/lab/disk_full.yaml", GOOD_SIGNATURE.replace("(?P<dir>/\\S+)", "(?P<dir>/\\S+"))
    found = messages(pack)
    assert any(m.startswith(f"{path}:4:1: error[bad-regex]: pattern does not compile: missing )") for m in found)


def test_regex_with_catastrophic_backtracking(pack: Path) -> None:
    path = write(
        pack,
        "signatures/lab/disk_full.yaml",
        GOOD_SIGNATURE.replace("pattern: 'No space left on device: (?P<dir>/\\S+)'", "pattern: 'No space left(?P<dir>(a|aa)+)!'").replace(
            "values: {dir: /ckpt/step_10}", "values: {}"
        ).replace("'OSError: [Errno 28] No space left on device: /ckpt/step_10'", "'No space left aa!'"),
    )
    assert f"{path}:4:1: error[slow-regex]: pattern took over 0.1s on a pathological line; remove nested or overlapping quantifiers" in messages(pack)


def test_examples_that_do_not_hold(pack: Path) -> None:
    text = GOOD_SIGNATURE.replace("values: {dir: /ckpt/step_10}", "values: {dir: /ckpt/step_11}").replace(
        "'space left on device is 10 GiB'", "'No space left on device: /tmp/x'"
    )
    path = write(pack, "signatures/lab/disk_full.yaml", text)
    assert messages(pack) == [
        f"{path}:7:7: error[example-value]: group 'dir' extracted '/ckpt/step_10', expected '/ckpt/step_11'",
        f"{path}:10:7: error[example-matches]: no_match example is matched by the signature",
    ]


def test_match_example_not_matched(pack: Path) -> None:
    path = write(pack, "signatures/lab/disk_full.yaml", GOOD_SIGNATURE.replace("No space left on device: /ckpt", "No room left on device: /ckpt"))
    assert messages(pack) == [f"{path}:7:7: error[example-no-match]: match example is not matched by the signature"]


def test_deprecated_id_still_referenced(pack: Path) -> None:
    path = write(pack, "signatures/lab/disk_full.yaml", GOOD_SIGNATURE.replace("source: a public issue", "source: a public issue\nstatus: deprecated\nreplaced_by: lab.disk_full_v2"))
    rule = Path(pack / "rules/lab/disk_full.yaml")
    assert messages(pack) == [f"{rule}:7:1: error[deprecated-ref]: rule uses deprecated signature 'lab.disk_full'; use 'lab.disk_full_v2'"]
    assert path.exists()


def test_malformed_yaml(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("    - hit: lab.disk_full\n", "    - hit: [lab.disk_full\n"))
    found = messages(pack)
    assert len(found) == 1 and found[0].startswith(f"{path}:10:9: error[yaml]: while parsing a flow sequence")


def test_cyclic_negation(pack: Path) -> None:
    write(pack, "rules/lab/a.yaml", """\
        id: lab.a
        title: derive a unless b
        role: derive
        source: test
        when:
          all:
            - hit: lab.disk_full
          none:
            - fact: b_seen
        then:
          derive:
            - fact: a_seen
        """)
    path_b = write(pack, "rules/lab/b.yaml", """\
        id: lab.b
        title: derive b unless a
        role: derive
        source: test
        when:
          all:
            - hit: lab.disk_full
          none:
            - fact: a_seen
        then:
          derive:
            - fact: b_seen
        """)
    found = messages(pack)
    assert f"{path_b}:8:3: error[cyclic-negation]: rule takes part in a cycle through negation (it negates a fact that it helps derive)" in found


def test_unknown_alias_and_cause(pack: Path) -> None:
    rule = GOOD_RULE.replace("    weight: 0.8\n", "    weight: -0.3\n    cause: lab.nothing\n    cite: [dsk]\n")
    path = write(pack, "rules/lab/disk_full.yaml", rule)
    found = messages(pack)
    assert f"{path}:15:5: error[unknown-alias]: cite names alias 'dsk', which no positive pattern binds" in found
    assert f"{path}:14:5: error[unknown-cause]: evidence goes to unknown cause 'lab.nothing'" in found


def test_template_reaching_python_internals(pack: Path) -> None:
    template = write(pack, "templates/fixes/lab/disk_full.md.j2", "{{ disk.__class__.__mro__ }}\n")
    write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace('fix: "Free space under {{ disk.dir }}."', "fix_template: fixes/lab/disk_full.md.j2"))
    found = messages(pack)
    assert f"{template}:1:9: error[template-internals]: templates may not reach Python internals (dunder attributes)" in found


def test_all_problems_in_one_run(pack: Path) -> None:
    write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("bucket: cluster_infra", "bucket: disk\nseverity: high"))
    write(pack, "signatures/lab/x.yaml", "id: lab.y\n")
    codes = sorted({m.split("error[")[1].split("]")[0] for m in messages(pack)})
    assert codes == ["bad-enum", "missing-key", "unknown-key"]


def test_where_on_a_field_no_signature_sets(pack: Path) -> None:
    path = write(pack, "rules/lab/disk_full.yaml", GOOD_RULE.replace("      as: disk\n", "      as: disk\n      where:\n        mount: /ckpt\n"))
    assert messages(pack) == [f"{path}:12:9: error[unknown-field]: no signature of this pattern sets field 'mount' (lab.disk_full)"]


def test_collect_references_and_patterns_are_checked_with_positions(tmp_path: Path) -> None:  # noqa: D103
    """A rule's collect entry naming an unknown catalog item, or a pattern on an unknown fact type,
    is a knowledge-base problem at file:line:col."""
    from rltriage.tools.lint import lint

    rules = tmp_path / "rules" / "mylab"
    rules.mkdir(parents=True)
    (rules / "needs_evidence.yaml").write_text(
        "id: mylab.needs_evidence\n"
        "title: A cause that says what would confirm it\n"
        "role: evidence\n"
        "bucket: cluster_infra\n"
        "source: test\n"
        "issue: x\n"
        "reason: y\n"
        "when:\n"
        "  all:\n"
        "    - fact: run\n"
        "then:\n"
        "  evidence:\n"
        "    weight: 0.1\n"
        "fix: nothing\n"
        "collect:\n"
        "  - item: no_such_item\n"
        "    confirms:\n"
        "      - fact: no_such_fact\n"
    )
    problems = lint([str(tmp_path)])
    by_code = {p.code: p for p in problems if p.path.endswith("needs_evidence.yaml")}
    assert "unknown-collect" in by_code and "unknown-fact" in by_code
    assert (by_code["unknown-collect"].line, by_code["unknown-collect"].col) == (16, 5)
    assert by_code["unknown-fact"].line == 18
    assert "no_such_fact" in by_code["unknown-fact"].message
