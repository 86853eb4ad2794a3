"""A new symptom added the way a contributor does it: `rules new`, fill in, `rules lint`, `rules test`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rltriage.cli import main

SIGNATURE = """\
id: mylab.checkpoint_disk_full
title: Disk full while saving a checkpoint
status: experimental
source: an incident on our cluster
references: []
pattern: 'No space left on device: (?P<target>/\\S+)'
examples:
  match:
    - line: '[rank0]: OSError: [Errno 28] No space left on device: /ckpt/global_step_40/model.safetensors'
      values: {target: /ckpt/global_step_40/model.safetensors}
  no_match:
    - 'Free space left on device: 120 GiB'
"""

RULE = """\
id: mylab.checkpoint_disk_full
title: The checkpoint volume is full
role: evidence
status: experimental
source: an incident on our cluster
bucket: cluster_infra
symptom: crash
issue: the run dies while saving a checkpoint
reason: the checkpoint volume has no space left
when:
  all:
    - hit: mylab.checkpoint_disk_full
      as: msg
then:
  evidence:
    weight: 0.8
  derive:
    - fact: symptom
      fields: {name: crash, weight: 3}
fix_template: fixes/mylab/checkpoint_disk_full.md.j2
patch_plan:
  - kind: file
    target: "{{ msg.target }}"
    change: free space on this volume or point the output dir elsewhere
verify:
  - the next checkpoint save completes
"""

TEMPLATE = "The volume holding `{{ msg.target }}` is full: free space or move the output directory.\n"

LOG = """\
2025-06-01 10:00:00 - INFO - training step 39 done
{'loss': 0.01, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'epoch': 0.1}
[rank0]: OSError: [Errno 28] No space left on device: /ckpt/global_step_40/model.safetensors
"""

EXPECT = """\
description: a run that dies saving a checkpoint on a full volume
symptom: crash
primary_bucket: cluster_infra
first_cause: mylab.checkpoint_disk_full
cites: [run.log:3]
fires: [mylab.checkpoint_disk_full]
report_contains: ["is full"]
"""

QUIET_LOG = "2025-06-01 10:00:00 - INFO - saved checkpoint to /ckpt/global_step_40\n"
QUIET_EXPECT = "description: a run that saved its checkpoint\nnot_fires: [mylab.checkpoint_disk_full]\n"


def test_new_symptom_from_scaffold_to_green(tmp_path: Path) -> None:
    runner = CliRunner()
    pack = tmp_path / "pack"
    result = runner.invoke(main, ["rules", "new", "--bucket", "cluster_infra", "--id", "mylab.checkpoint_disk_full", "--rules-dir", str(pack)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output

    # The untouched scaffold is refused: placeholders are lint errors.
    lint = runner.invoke(main, ["rules", "lint", "--rules-dir", str(pack)])
    assert lint.exit_code == 1
    assert "error[placeholder]" in lint.output

    # A second scaffold with the same id is refused: ids are never reused.
    again = runner.invoke(main, ["rules", "new", "--bucket", "cluster_infra", "--id", "mylab.checkpoint_disk_full", "--rules-dir", str(pack)])
    assert again.exit_code == 2

    (pack / "signatures/mylab/checkpoint_disk_full.yaml").write_text(SIGNATURE)
    (pack / "rules/mylab/checkpoint_disk_full.yaml").write_text(RULE)
    (pack / "templates/fixes/mylab/checkpoint_disk_full.md.j2").write_text(TEMPLATE)
    (pack / "fixtures/mylab/checkpoint_disk_full/run.log").write_text(LOG)
    (pack / "fixtures/mylab/checkpoint_disk_full/expect.yaml").write_text(EXPECT)
    (pack / "fixtures/mylab/checkpoint_disk_full_quiet/run.log").write_text(QUIET_LOG)
    (pack / "fixtures/mylab/checkpoint_disk_full_quiet/expect.yaml").write_text(QUIET_EXPECT)

    lint = runner.invoke(main, ["rules", "lint", "--rules-dir", str(pack)])
    assert lint.exit_code == 0, lint.output
    tested = runner.invoke(main, ["rules", "test", "--rules-dir", str(pack), "mylab.checkpoint_disk_full"])
    assert tested.exit_code == 0, tested.output
    assert "pass  signature mylab.checkpoint_disk_full" in tested.output
    assert "pass  fixture" in tested.output and "mylab/checkpoint_disk_full_quiet" in tested.output

    shown = runner.invoke(main, ["rules", "show", "mylab.checkpoint_disk_full", "--rules-dir", str(pack)])
    assert shown.exit_code == 0
    assert "fixtures that fire it: mylab/checkpoint_disk_full" in shown.output
    assert "used by rules: mylab.checkpoint_disk_full" in shown.output

    listed = runner.invoke(main, ["rules", "list", "--bucket", "cluster_infra", "--format", "json", "--rules-dir", str(pack)])
    assert '"id": "mylab.checkpoint_disk_full"' in listed.output

    # A broken expectation makes `rules test` fail.
    (pack / "fixtures/mylab/checkpoint_disk_full/expect.yaml").write_text(EXPECT.replace("cluster_infra", "vram_pressure"))
    failing = runner.invoke(main, ["rules", "test", "--rules-dir", str(pack), "mylab.checkpoint_disk_full"])
    assert failing.exit_code == 1
    assert "primary bucket is cluster_infra, expected vram_pressure" in failing.output
