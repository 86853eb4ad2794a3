from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from rltriage.base.errors import InputError
from rltriage.cli.smoke import smoke_command
from rltriage.tools.smoke import SmokeResult, smoke, smoke_text

REPO = Path(__file__).resolve().parent.parent

TRL_YAML = """\
# GRPO math run — keep in sync with the paper table
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct  # policy
num_generations: 6   # group size
max_completion_length: 2048
per_device_train_batch_size: 6
gradient_accumulation_steps: 4
generation_batch_size: 48
reward_funcs: [accuracy_reward, format_reward]
reward_weights: [1.0, 0.5]
eval_strategy: steps
logging_steps: 10

# remote judge
judge:
  url: http://judge-svc:8000/v1/score  # the slow one
  request_timeout: 600
num_train_epochs: 1
"""

VERL_YAML = """\
# verl GRPO, 2 nodes x 8 GPUs
data:
  train_files: /data/gsm8k/train.parquet
  train_batch_size: 1024
  max_response_length: 4096
actor_rollout_ref:
  actor:
    ppo_mini_batch_size: 256
    ppo_micro_batch_size_per_gpu: 8
  rollout:
    n: 8
    response_length: ${data.max_response_length}
trainer:
  nnodes: 2
  n_gpus_per_node: 8
  total_epochs: 15
  test_freq: 5
  val_before_train: true
"""

DISAGG_YAML = """\
# posttrain GRPO recipe
experiment: grpo_qwen3_8b_gsm8k
grid:
  backend: ray
  shapes:
    policy: [1, 8]
rollout:
  max_tokens: 4096
validation:
  max_tokens: 4096
rl:
  group_size: 8
  batch_per_replica: 64   # whole groups
  micro_batch_per_replica: 16
  min_informative_groups: 4
"""

LAUNCH_SH = """\
#!/bin/bash
# launch GRPO on 8 GPUs
# --num_generations 16 (old value, a comment: never touched)
export NCCL_DEBUG=INFO
accelerate launch --num_processes 8 train_grpo.py \\
    --num_generations 8 --max_completion_length=2048 \\
    --per_device_train_batch_size 1 \\
    --reward_funcs accuracy_reward format_reward \\
    --use_vllm \\
    --output_dir out/grpo
"""


def _yaml(text: str) -> Any:
    return YAML(typ="safe").load(io.StringIO(text))


def _changed(result: SmokeResult) -> dict[str, Any]:
    return {c.key: c.new for c in result.changes}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_trl_yaml_reduced_with_comments_and_order_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, "grpo.yaml", TRL_YAML)
    result = smoke(path)
    assert result.trainer == "trl" and result.format == "yaml"
    for comment in ("# GRPO math run — keep in sync with the paper table", "# policy", "num_generations: 2   # group size", "# remote judge", "# the slow one"):
        assert comment in result.text
    data = _yaml(result.text)
    original_order = list(_yaml(TRL_YAML))
    assert list(data)[: len(original_order)] == original_order
    assert data["num_generations"] == 2
    assert data["max_completion_length"] == 128
    assert data["max_steps"] == 1
    assert data["gradient_accumulation_steps"] == 1
    assert data["eval_strategy"] == "no"  # quoted: a YAML 1.1 reader must not see False
    assert '"no"' in result.text
    assert data["reward_funcs"] == ["stub_reward"] and data["reward_weights"] == [1.0]
    assert data["judge"]["url"] is None and data["judge"]["request_timeout"] == 600
    assert data["logging_steps"] == 1
    # 6 is already divisible by 2 and stays; the generation batch must hold whole per-device batches.
    assert data["per_device_train_batch_size"] == 6
    assert data["generation_batch_size"] == 6
    assert data["generation_batch_size"] % data["num_generations"] == 0
    assert data["generation_batch_size"] % data["per_device_train_batch_size"] == 0
    header = result.text.split("# GRPO math run")[0]
    assert header.startswith("# rltriage smoke test") and "def stub_reward(" in header
    assert result.diff.startswith(f"--- {path}\n+++ ")
    assert "\n-num_generations: 6   # group size\n" in result.diff and "\n+num_generations: 2   # group size\n" in result.diff
    assert path.read_text(encoding="utf-8") == TRL_YAML


def test_trl_odd_batch_made_divisible() -> None:
    result = smoke_text("num_generations: 8\nper_device_train_batch_size: 3\ngradient_accumulation_steps: 1\n", name="c.yaml")
    data = _yaml(result.text)
    assert data["per_device_train_batch_size"] % 2 == 0
    assert data["num_generations"] == 2 and data["max_steps"] == 1


def test_trl_known_process_count_keeps_valid_batch() -> None:
    result = smoke_text("num_generations: 8\nnum_processes: 4\nper_device_train_batch_size: 1\n", name="c.yaml")
    data = _yaml(result.text)
    assert data["per_device_train_batch_size"] == 1  # 4 × 1 is divisible by 2 already
    assert "per_device_train_batch_size" not in _changed(result)


def test_verl_yaml_keeps_batch_contracts() -> None:
    result = smoke_text(VERL_YAML, name="ppo.yaml")
    assert result.trainer == "verl"
    data = _yaml(result.text)
    world = 16
    n = data["actor_rollout_ref"]["rollout"]["n"]
    assert n == 2
    assert data["data"]["max_response_length"] == 128
    batch = data["data"]["train_batch_size"]
    mini = data["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]
    micro = data["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"]
    assert (batch * n) % world == 0 and batch % mini == 0
    assert (mini * n // world) % micro == 0
    assert batch == 8
    assert data["trainer"]["total_training_steps"] == 1
    assert data["trainer"]["test_freq"] == -1 and data["trainer"]["val_before_train"] is False
    # An interpolation points at another key: left alone.
    assert "response_length: ${data.max_response_length}" in result.text
    assert "# verl GRPO, 2 nodes x 8 GPUs" in result.text


def test_disaggregated_yaml_keeps_batch_contracts() -> None:
    result = smoke_text(DISAGG_YAML, name="recipe.yaml")
    assert result.trainer == "disaggregated"
    rl = _yaml(result.text)["rl"]
    assert rl["group_size"] == 2
    assert rl["micro_batch_per_replica"] % 8 == 0  # dp_world from grid.shapes.policy
    assert rl["batch_per_replica"] % rl["group_size"] == 0
    assert rl["batch_per_replica"] % rl["micro_batch_per_replica"] == 0
    assert rl["min_informative_groups"] == 0
    assert _yaml(result.text)["rollout"]["max_tokens"] == 128
    assert "batch_per_replica: 8    # whole groups" in result.text
    assert any("step count to 1" in note for note in result.notes)


def test_json_config_keeps_key_order(tmp_path: Path) -> None:
    original = {"model_name_or_path": "m", "num_generations": 8, "max_completion_length": 1024, "per_device_train_batch_size": 3, "reward_funcs": "judge_reward", "do_eval": True, "max_steps": 500}
    path = _write(tmp_path, "cfg.json", json.dumps(original, indent=4) + "\n")
    result = smoke(path)
    assert result.format == "json"
    data = json.loads(result.text)
    assert list(data) == list(original)
    assert data["num_generations"] == 2 and data["max_completion_length"] == 128 and data["max_steps"] == 1
    assert data["per_device_train_batch_size"] % 2 == 0
    assert data["reward_funcs"] == "stub_reward" and data["do_eval"] is False
    assert result.text.startswith('{\n    "model_name_or_path"')


def test_launch_script_flags_rewritten_in_place(tmp_path: Path) -> None:
    path = _write(tmp_path, "launch.sh", LAUNCH_SH)
    result = smoke(path)
    assert result.format == "args"
    text = result.text
    assert text.startswith("#!/bin/bash\n# rltriage smoke test")
    assert "--num_generations 2 --max_completion_length=128 \\\n" in text
    assert "--reward_funcs stub_reward \\\n" in text
    assert "--output_dir out/grpo --max_steps 1\n" in text
    assert "# --num_generations 16 (old value" in text
    assert "export NCCL_DEBUG=INFO" in text
    # 8 processes × 1 per device is divisible by 2: the batch stays.
    assert "--per_device_train_batch_size 1 \\" in text


def test_hydra_launch_script() -> None:
    script = "python3 -m verl.trainer.main_ppo \\\n    data.train_batch_size=1024 \\\n    actor_rollout_ref.rollout.n=5 \\\n    trainer.n_gpus_per_node=8 trainer.nnodes=1 \\\n    trainer.test_freq=5 $@\n"
    result = smoke_text(script, name="run.sh")
    assert result.trainer == "verl"
    assert "actor_rollout_ref.rollout.n=2" in result.text
    assert "data.train_batch_size=4" in result.text
    assert "trainer.test_freq=-1 trainer.total_training_steps=1 $@" in result.text


def test_cli_prints_diff_and_writes_nothing_without_output(tmp_path: Path) -> None:
    path = _write(tmp_path, "grpo.yaml", TRL_YAML)
    result = CliRunner().invoke(smoke_command, [str(path)])
    assert result.exit_code == 0, result.output
    assert "+num_generations: 2   # group size" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grpo.yaml"]
    assert path.read_text(encoding="utf-8") == TRL_YAML


def test_cli_output_writes_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "grpo.yaml", TRL_YAML)
    out = tmp_path / "grpo.smoke.yaml"
    result = CliRunner().invoke(smoke_command, [str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == smoke(path).text
    assert path.read_text(encoding="utf-8") == TRL_YAML
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grpo.smoke.yaml", "grpo.yaml"]  # no temp file left
    # Written output is already reduced: a second pass changes nothing.
    again = smoke(out)
    assert again.changes == [] and again.text == out.read_text(encoding="utf-8") and again.diff == ""


def test_cli_argument_string() -> None:
    result = CliRunner().invoke(smoke_command, ["--num_generations 8 --max_completion_length 2048"])
    assert result.exit_code == 0, result.output
    assert "+--num_generations 2 --max_completion_length 128 --max_steps 1" in result.stdout


@pytest.mark.parametrize("content", ["just some words\n", "- a\n- b\n"])
def test_unknown_config_exits_2(tmp_path: Path, content: str) -> None:
    path = _write(tmp_path, "x.conf", content)
    with pytest.raises(InputError):
        smoke(path)
    assert CliRunner().invoke(smoke_command, [str(path)]).exit_code == 2
    assert CliRunner().invoke(smoke_command, [str(tmp_path / "missing.yaml")]).exit_code == 2


def test_broken_yaml_exits_2(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.yaml", "a: [1, 2\nb: : :\n")
    assert CliRunner().invoke(smoke_command, [str(path)]).exit_code == 2


def test_subprocess_entry_point(tmp_path: Path) -> None:
    path = _write(tmp_path, "grpo.yaml", TRL_YAML)
    out = tmp_path / "out.yaml"
    code = "from rltriage.cli.smoke import smoke_command; smoke_command()"
    done = subprocess.run([sys.executable, "-c", code, str(path), "-o", str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"--- {path}\n+++ {out}\n")
    assert _yaml(out.read_text(encoding="utf-8"))["num_generations"] == 2
    missing = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nope.yaml")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_yaml_indentation_and_quotes_round_trip() -> None:
    text = "# four-space recipe\nmodel:\n    name: 'Qwen/Qwen3-8B'\n    dtype: \"bfloat16\"\nnum_generations: 8\nmax_steps: 1\nreward_funcs:\n  - accuracy_reward\n"
    result = smoke_text(text, name="c.yaml")
    assert "model:\n    name: 'Qwen/Qwen3-8B'\n    dtype: \"bfloat16\"\n" in result.text
    assert "reward_funcs:\n  - stub_reward\n" in result.text


def test_commands_register_on_the_cli_group() -> None:
    import click

    from rltriage.cli import main
    from rltriage.cli.verify import verify_command

    group = click.Group(commands=[smoke_command, verify_command])
    assert sorted(group.commands) == ["smoke", "verify"]
    assert isinstance(main, click.Group)


TRAIN_PY = 'import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument("--num_generations", type=int, default=8)\n'


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("train_grpo.py", TRAIN_PY, "a Python source file, not a config or launch command"),
        ("README.md", "# Run\n\n```\naccelerate launch train.py --num_generations 8\n```\n", "a Markdown document, not a config or launch command"),
        ("deploy.yaml", "name: web\nreplicas: 3\nimage: nginx\n", "not a TRL, verl or disaggregated-trainer config"),
        ("notes.txt", "Use --num_generations 8 to get more samples per prompt.\n", "no launch command with `--flag value`"),
        ("sft.sh", "#!/bin/bash\ntorchrun --nproc_per_node 8 train_sft.py --deepspeed ds.json\n", "not a TRL, verl or disaggregated-trainer config"),
    ],
)
def test_what_is_not_a_config_is_refused_in_one_line_and_never_written(tmp_path: Path, name: str, content: str, why: str) -> None:
    path = _write(tmp_path, name, content)
    out = tmp_path / "out"
    result = CliRunner().invoke(smoke_command, [str(path), "-o", str(out)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and why in result.stderr
    assert not out.exists() and path.read_text(encoding="utf-8") == content


def test_flags_off_the_launch_command_are_not_edited() -> None:
    script = (
        "#!/bin/bash\n"
        "echo 'tip: pass --num_generations 16 for more samples'\n"
        "cat > notes.md <<EOF\nrun with --max_completion_length 4096\nEOF\n"
        "accelerate launch train_grpo.py \\\n    --num_generations 8 \\\n    --max_completion_length 1024\n"
    )
    result = smoke_text(script, name="run.sh")
    assert "echo 'tip: pass --num_generations 16 for more samples'" in result.text
    assert "run with --max_completion_length 4096\n" in result.text
    assert "--num_generations 2 \\\n    --max_completion_length 128" in result.text
    assert "trl-first-step-hang-debugger" not in result.text
