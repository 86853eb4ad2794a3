"""Errors a user meets in the first hour: each exits non-zero with one clear line. And what the
output looks like whatever the order of inputs: archive member order, file order and --jobs never
change a byte. Files honour the umask; colour follows --color, NO_COLOR and FORCE_COLOR."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rltriage.cli import main

from .conftest import FIXTURES, REPO

HANG = FIXTURES / "trl/reward_never_returned"
ODD_RANK = FIXTURES / "stacks/odd_rank_in_reward"
CLI = [sys.executable, "-c", "from rltriage.cli import main; main()"]


def _one_line_error(result: Result) -> str:
    stderr = result.stderr
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("rltriage: ")
    return str(stderr)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["explain", "--cause", "no.such", str(HANG)], "no rule 'no.such' in the knowledge base"),
        (["explain", "--bucket", "nope", str(HANG)], "unknown bucket 'nope'; one of rollout_hang"),
    ],
)
def test_explain_refuses_what_does_not_exist(args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert says in _one_line_error(result)
    assert result.stdout == ""


def test_explain_of_a_real_rule_that_did_not_fire_still_works() -> None:
    result = CliRunner().invoke(main, ["explain", "--cause", "generic.raised_in_reward", str(HANG)])
    assert result.exit_code == 0
    assert "generic.raised_in_reward is not among the ranked causes." in result.stdout


def test_explain_near_misses_are_about_this_run() -> None:
    result = CliRunner().invoke(main, ["explain", str(FIXTURES / "generic/gpu_oom_triton_launch")])
    assert result.exit_code == 0
    misses = result.stdout.split("near misses", 1)[1].splitlines()[1:] if "near misses" in result.stdout else []
    # Rules whose only match is the `run` fact every diagnosis has are not near misses.
    assert not any(line.strip().startswith(("k8s.", "lego.")) for line in misses), misses


@pytest.mark.parametrize("command", ["diagnose", "verify", "explain"])
def test_an_empty_folder_is_an_error_not_a_clean_report(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "run"
    empty.mkdir()
    result = CliRunner().invoke(main, [command, str(empty)])
    assert result.exit_code == 2
    assert "no log, config or stack dump file found in" in _one_line_error(result)
    assert "No failure was found" not in result.stdout


def test_output_closed_early_is_one_line_not_a_silent_1() -> None:
    proc = subprocess.Popen([*CLI, "rules", "list"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == "rltriage: output closed early (broken pipe); stopped\n"


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_files_honour_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    out = tmp_path / "report.md"
    pages = tmp_path / "pages"
    done = subprocess.run([*CLI, "diagnose", "-o", str(out), str(HANG)], cwd=REPO, capture_output=True, timeout=300, preexec_fn=lambda: os.umask(umask))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == mode
    root = tmp_path / "runs"
    (root / "one").mkdir(parents=True)
    (root / "one" / "train.log").write_text((HANG / "train.log").read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run([*CLI, "batch", str(root), "--html", str(pages)], cwd=REPO, capture_output=True, timeout=300, preexec_fn=lambda: os.umask(umask))
    assert done.returncode == 0, done.stderr
    assert {stat.S_IMODE(p.stat().st_mode) for p in pages.iterdir() if p.is_file()} == {mode}


def test_an_existing_output_file_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    out.write_text("old", encoding="utf-8")
    out.chmod(0o640)
    assert CliRunner().invoke(main, ["diagnose", "-o", str(out), str(HANG)]).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text(encoding="utf-8") != "old"


@pytest.mark.parametrize(
    ("args", "env", "coloured"),
    [
        (["--color", "always"], {}, True),
        (["--color", "never"], {"FORCE_COLOR": "1"}, False),
        ([], {}, False),  # not a terminal
        ([], {"FORCE_COLOR": "1"}, True),
        ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
        (["--color", "always"], {"NO_COLOR": "1"}, True),  # the flag beats the environment
    ],
)
def test_colour_follows_the_flag_then_no_color_then_force_color(args: list[str], env: dict[str, str], coloured: bool) -> None:
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | env
    done = subprocess.run([*CLI, "diagnose", *args, str(HANG)], cwd=REPO, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0
    assert ("\x1b[" in done.stdout) is coloured


def test_force_color_does_not_write_escape_codes_into_a_file(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"FORCE_COLOR": "1"}
    done = subprocess.run([*CLI, "diagnose", "-o", str(out), str(HANG)], cwd=REPO, capture_output=True, timeout=300, env=environment)
    assert done.returncode == 0
    assert "\x1b[" not in out.read_text(encoding="utf-8")


def _tar(path: Path, folder: Path, names: list[str]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name in names:
            data = (folder / name).read_bytes()
            info = tarfile.TarInfo(f"run/{name}")
            info.size, info.mtime = len(data), 0
            archive.addfile(info, io.BytesIO(data))


def _zip(path: Path, folder: Path, names: list[str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(f"run/{name}", (folder / name).read_bytes())


@pytest.mark.parametrize("make", [_tar, _zip])
def test_archive_member_order_and_jobs_never_change_a_byte(tmp_path: Path, make: object) -> None:
    names = sorted(p.name for p in ODD_RANK.iterdir() if p.name != "expect.yaml")
    archive = tmp_path / ("run.tar.gz" if make is _tar else "run.zip")
    outputs = set()
    for order in (names, names[::-1], names[1:] + names[:1]):
        make(archive, ODD_RANK, order)  # type: ignore[operator]
        for jobs in ("1", "2"):
            for fmt in ("text", "json"):
                result = CliRunner().invoke(main, ["diagnose", "--format", fmt, "--jobs", jobs, str(archive)])
                assert result.exit_code == 0, result.output
                outputs.add((fmt, result.stdout))
    assert len(outputs) == 2  # one text and one json, whatever the order and the workers
    text = next(out for fmt, out in outputs if fmt == "text")
    assert "stacks-rank2.txt" in text


def test_file_order_on_the_command_line_never_changes_a_byte() -> None:
    files = sorted(str(p) for p in ODD_RANK.iterdir() if p.name != "expect.yaml")
    first = CliRunner().invoke(main, ["diagnose", *files]).stdout
    assert CliRunner().invoke(main, ["diagnose", *files[::-1]]).stdout == first
    assert CliRunner().invoke(main, ["diagnose", "--jobs", "2", *files[2:], *files[:2]]).stdout == first


def _run_folder(root: Path, name: str, generations: int, extra: str = "") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"num_generations: {generations}\nper_device_train_batch_size: 8\n{extra}", encoding="utf-8")
    (folder / "train.log").write_text((HANG / "train.log").read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def test_two_different_runs_given_together_are_not_merged_silently(tmp_path: Path) -> None:
    first = _run_folder(tmp_path, "sweep-a", 8)
    second = _run_folder(tmp_path, "sweep-b", 16)
    result = CliRunner().invoke(main, ["diagnose", str(first), str(second)])
    assert result.exit_code == 2
    line = _one_line_error(result)
    assert "look like two different runs: num_generations is 8 at" in line and "but 16 at" in line and "--same-run" in line
    assert CliRunner().invoke(main, ["diagnose", "--same-run", str(first), str(second)]).exit_code == 0


def test_the_nodes_of_one_run_are_one_run(tmp_path: Path) -> None:
    # Same settings, per-node values (node_rank, master_addr) differing: parts of one run.
    first = _run_folder(tmp_path, "node0", 8, "node_rank: 0\n")
    second = _run_folder(tmp_path, "node1", 8, "node_rank: 1\n")
    assert CliRunner().invoke(main, ["diagnose", str(first), str(second)]).exit_code == 0
    # Files of one folder given one by one are never "two runs".
    assert CliRunner().invoke(main, ["diagnose", str(first / "config.yaml"), str(second / "config.yaml"), str(first / "train.log")]).exit_code == 0


def test_a_report_is_written_whole_a_piece_at_a_time(tmp_path: Path) -> None:
    from rltriage.cli.common import WRITE_PIECE, pieces, write_report

    text = ("é" * (WRITE_PIECE - 1)) + "🙂 " + "x" * (2 * WRITE_PIECE + 5)
    assert "".join(pieces(text)) == text and max(map(len, pieces(text))) == WRITE_PIECE and list(pieces("")) == []
    target = tmp_path / "report.json"
    write_report(text, str(target))
    assert target.read_text(encoding="utf-8") == text
    existing = tmp_path / "old.json"
    existing.write_text("old", encoding="utf-8")
    write_report(text, str(existing))
    assert existing.read_bytes() == text.encode("utf-8")
