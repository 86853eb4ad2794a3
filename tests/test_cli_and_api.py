"""The command line and the library as users meet them: exit codes, formats, determinism, threads."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from click.testing import CliRunner

import rltriage
from rltriage.cli import main

from .conftest import FIXTURES, all_fixtures

HANG = FIXTURES / "trl/reward_never_returned"


def test_missing_path_exits_2_with_one_line() -> None:
    result = CliRunner().invoke(main, ["diagnose", "/no/such/run"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "rltriage: /no/such/run: no such file or folder"


def test_bad_invocation_exits_2() -> None:
    assert CliRunner().invoke(main, ["diagnose"]).exit_code == 2
    assert CliRunner().invoke(main, ["diagnose", "--format", "xml", str(HANG)]).exit_code == 2


def test_broken_rule_pack_exits_3_with_position(tmp_path: Path) -> None:
    (tmp_path / "rules" / "lab").mkdir(parents=True)
    (tmp_path / "rules" / "lab" / "x.yaml").write_text("id: lab.x\ntitle: broken\nsource: test\nwhen: {all: [{hit: nope}]}\nthen: {}\nrole: evidence\n")
    result = CliRunner().invoke(main, ["diagnose", "--rules-dir", str(tmp_path), str(HANG)])
    assert result.exit_code == 3
    assert f"{tmp_path}/rules/lab/x.yaml:5:1: error[schema]" in result.stderr


def test_library_raises_instead_of_exiting() -> None:
    try:
        rltriage.diagnose(["/no/such/run"])
    except rltriage.InputError as exc:
        assert "no such file or folder" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected InputError")


def test_text_report_has_the_six_sections_in_order() -> None:
    result = CliRunner().invoke(main, ["diagnose", str(HANG)])
    assert result.exit_code == 0
    sections = ["Failure summary", "Boundary proof", "Root-cause ranking", "Minimal fix", "Patch plan", "Verification"]
    positions = [result.output.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "\x1b[" not in result.output  # no colour when not on a terminal


def test_markdown_report() -> None:
    result = CliRunner().invoke(main, ["diagnose", "--format", "markdown", str(HANG)])
    assert result.exit_code == 0
    assert "## Boundary proof" in result.output and "## Patch plan" in result.output


def test_stdin_input() -> None:
    log = (HANG / "train.log").read_bytes()
    result = CliRunner().invoke(main, ["diagnose", "--format", "json", "-"], input=log)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["primary_bucket"] == "reward_blocking"
    assert document["inputs"][0]["path"] == "<stdin>"


def test_output_file_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["diagnose", "--format", "json", "-o", str(target), str(HANG)])
    assert result.exit_code == 0
    assert json.loads(target.read_text())["symptom"] == "hang"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_same_input_gives_byte_identical_output() -> None:
    runs = [CliRunner().invoke(main, ["diagnose", "--format", "json", str(HANG)]).stdout for _ in range(2)]
    assert runs[0] == runs[1]
    first = subprocess.run([sys.executable, "-m", "rltriage", "diagnose", "--format", "markdown", str(HANG)], capture_output=True, check=True)
    second = subprocess.run([sys.executable, "-m", "rltriage", "diagnose", "--format", "markdown", str(HANG)], capture_output=True, check=True)
    assert first.stdout == second.stdout


def test_threads_give_the_serial_results() -> None:
    folders = all_fixtures()[:8]
    serial = [rltriage.diagnose([str(f)]).model_dump_json() for f in folders]
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda f: rltriage.diagnose([str(f)]).model_dump_json(), folders))
    assert threaded == serial


def test_input_order_does_not_change_the_diagnosis() -> None:
    files = sorted(str(p) for p in HANG.iterdir())
    forward = rltriage.diagnose(files).model_dump_json()
    backward = rltriage.diagnose(list(reversed(files))).model_dump_json()
    assert forward == backward


def test_explain_shows_the_chain_and_a_near_miss(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["explain", str(HANG)])
    assert result.exit_code == 0, result.output
    assert "#1 trl.reward_never_returned [reward_blocking]" in result.output
    assert "rule core.boundary fired on:" in result.output
    assert "rule stages.marker fired on:" in result.output
    assert "train.log:19" in result.output
    # A near miss: the same run without its first-generation marker no longer proves the boundary.
    lines = (HANG / "train.log").read_text().splitlines(keepends=True)
    (tmp_path / "train.log").write_text("".join(line for line in lines if "first_generation_finished" not in line))
    result = CliRunner().invoke(main, ["explain", "--cause", "trl.reward_never_returned", str(tmp_path)])
    assert "near misses" in result.output
    assert "trl.reward_never_returned [reward_blocking] matched 0 pattern(s); lacked: no fact boundary(first_missing='reward_computed')" in result.output


def test_secrets_never_reach_any_output(tmp_path: Path) -> None:
    secrets = {
        "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "wandb": "0123456789abcdef0123456789abcdef01234567",
        "aws": "AKIAIOSFODNN7EXAMPLE",
        "gcp": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "url": "s3cr3t-pa55",
        "env": "hunter2-very-secret",
        "azure": "q2HFaEbkKpZ8fSKM3l1sWv9TQy3uFzR8cRzE0xZXbY4uLm7kT6c1aPeIoU5sNbVq",
        "basic": "dXNlcjpzM2NyZXQtYmFzaWMtcGFzcw==",
        "private_key": "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0",
    }
    log = (HANG / "train.log").read_text()
    planted = (
        f"2025-05-14 09:13:58 - INFO - rltriage - [rltriage] stage=first_generation_finished step=0 HF_TOKEN={secrets['hf']} "
        f"WANDB_API_KEY={secrets['wandb']} aws={secrets['aws']} key={secrets['gcp']} Authorization: Bearer {secrets['bearer']} "
        f"https://trainer:{secrets['url']}@judge.internal/v1 DB_PASSWORD={secrets['env']} "
        f"DefaultEndpointsProtocol=https;AccountName=ckpt;AccountKey={secrets['azure']}; Authorization: Basic {secrets['basic']} "
        f"-----BEGIN RSA PRIVATE KEY-----{secrets['private_key']}-----END RSA PRIVATE KEY-----\n"
    )
    (tmp_path / "train.log").write_text(log.replace(log.splitlines(keepends=True)[18], planted))
    outputs = []
    for fmt in ("text", "markdown", "json"):
        outputs.append(CliRunner().invoke(main, ["diagnose", "--format", fmt, str(tmp_path)]).output)
    outputs.append(CliRunner().invoke(main, ["explain", str(tmp_path)]).output)
    batch_root = tmp_path.parent / f"{tmp_path.name}-batch"
    (batch_root / "run1").mkdir(parents=True)
    (batch_root / "run1" / "train.log").write_text((tmp_path / "train.log").read_text())
    batch = CliRunner().invoke(main, ["batch", "-o", str(batch_root / "out.jsonl"), str(batch_root)])
    assert batch.exit_code == 0, batch.output
    outputs.append((batch_root / "out.jsonl").read_text())
    assert "[REDACTED]" in outputs[2]
    for output in outputs:
        for name, secret in secrets.items():
            assert secret not in output, f"{name} secret leaked"
    raw = CliRunner().invoke(main, ["diagnose", "--format", "json", "--no-redact", str(tmp_path)]).output
    assert secrets["hf"] in raw
