"""Round 2: `-o` never destroys what it names and never gives a traceback, and `batch` refuses a
results file it cannot validate. Each case runs the command line under the time and 200 MB bounds
and checks the one-line message, the exit code, what became of the target and that a good target
still gets the whole report."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .bounds import cli, report

MARKER = "[rltriage] stage=first_generation_started step=0"
GOOD = f"starting\n{MARKER}\ndone\n"
HEADER = "rltriage "  # the first word of a text report


def good_log(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "train.log"
    log.write_text(GOOD)
    return log


def refused(args: list[str], message: str, name: str) -> None:
    outcome = cli(args, seconds=30).check(2, 30)
    report(name, outcome)
    assert outcome.stderr.splitlines() == [f"rltriage: {message}"]
    assert outcome.stdout == ""


# --- what -o may not touch -----------------------------------------------------------------------


def test_o_naming_an_input_is_refused_and_the_input_kept(tmp_path: Path) -> None:
    log = good_log(tmp_path / "run")
    before = log.read_bytes()
    refused(["diagnose", "-o", str(log), str(log)], f"cannot write {log}: it is one of the inputs ({log}); refusing to overwrite it", "-o an input")
    inside = tmp_path / "run" / "notes.txt"
    inside.write_text("evidence\n")
    run = str(tmp_path / "run")
    refused(["diagnose", "-o", str(inside), run], f"cannot write {inside}: it is one of the inputs ({run}); refusing to overwrite it", "-o a file of an input folder")
    link = tmp_path / "link.txt"
    link.symlink_to(log)
    refused(["diagnose", "-o", str(link), str(log)], f"cannot write {link}: it is one of the inputs ({log}); refusing to overwrite it", "-o a link to an input")
    assert log.read_bytes() == before and inside.read_text() == "evidence\n" and link.is_symlink()


def test_o_into_a_missing_folder_a_folder_or_a_kernel_file(tmp_path: Path) -> None:
    log = good_log(tmp_path / "run")
    missing = tmp_path / "nowhere" / "report.txt"
    refused(["diagnose", "-o", str(missing), str(log)], f"cannot write {missing}: folder {missing.parent} does not exist", "-o missing folder")
    refused(["diagnose", "-o", str(tmp_path), str(log)], f"cannot write {tmp_path}: it is a folder", "-o a folder")
    refused(["diagnose", "-o", "/proc/self/x", str(log)], "cannot write /proc/self/x: a file of the kernel's /proc or /sys, not a report", "-o /proc/self/x")
    refused(["diagnose", "-o", "/dev/fd/97", str(log)], "cannot write /dev/fd/97: descriptor 97 is not open", "-o a closed descriptor")
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "absent" / "x")
    refused(["diagnose", "-o", str(broken), str(log)], f"cannot write {broken}: a broken symbolic link (not followed)", "-o a broken link")
    assert broken.is_symlink() and not missing.parent.exists()
    refused(["diagnose", "-o", "/dev/full", str(log)], "cannot write /dev/full: No space left on device", "-o /dev/full")


def test_o_writes_through_devices_links_and_stdout(tmp_path: Path) -> None:
    log = good_log(tmp_path / "run")
    # /dev/null stays the device it was.
    before = os.stat("/dev/null")
    outcome = cli(["diagnose", "-o", "/dev/null", str(log)]).check(0, 30)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev) and outcome.stdout == ""
    # /dev/stdout and /dev/fd/1 are the descriptor itself.
    for name in ("/dev/stdout", "/dev/fd/1"):
        outcome = cli(["diagnose", "-o", name, str(log)]).check(0, 30)
        assert outcome.stdout.startswith(HEADER) and f"{log}:2" in outcome.stdout, name
    # A shell appending to a file keeps what was there.
    appended = tmp_path / "appended.txt"
    appended.write_text("kept\n")
    inode = appended.stat().st_ino
    with open(appended, "a") as handle:
        subprocess.run([sys.executable, "-m", "rltriage", "diagnose", "-o", "/dev/stdout", str(log)], stdout=handle, check=True, timeout=60)
    assert appended.read_text().startswith("kept\n" + HEADER) and appended.stat().st_ino == inode
    # A symbolic link to a report is written through: the link stays, its target gets the report.
    target = tmp_path / "reports" / "report.txt"
    target.parent.mkdir()
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "latest.txt"
    link.symlink_to(target)
    cli(["diagnose", "-o", str(link), str(log)]).check(0, 30)
    assert link.is_symlink() and target.read_text().startswith(HEADER) and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["report.txt"]  # no temporary file left


def test_o_writes_to_a_fifo_with_a_reader_and_refuses_one_without(tmp_path: Path) -> None:
    log = good_log(tmp_path / "run")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        outcome = cli(["diagnose", "-o", str(fifo), str(log)]).check(0, 30)
    finally:
        reader.join(30)
    report("-o a FIFO with a reader", outcome)
    assert got and got[0].decode().startswith(HEADER) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    refused(["diagnose", "-o", str(fifo), str(log)], f"cannot write {fifo}: a named pipe with no reader", "-o a FIFO without a reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_o_regular_file_is_replaced_atomically_with_usual_permissions(tmp_path: Path) -> None:
    log = good_log(tmp_path / "run")
    out = tmp_path / "out" / "report.json"
    out.parent.mkdir()
    cli(["diagnose", "--format", "json", "-o", str(out), str(log)]).check(0, 30)
    assert json.loads(out.read_text())["boundary"]["last_completed"] == "first_generation_started"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]


# --- batch results files -------------------------------------------------------------------------


CORRUPT = {
    "nested": "[" * 100_000 + "]" * 100_000,
    "run not a string": json.dumps({"run": 5, "error": "x"}),
    "wrong types": json.dumps({"run": "r", "causes": "not a list", "primary_bucket": 3}),
    "cause without a rule": json.dumps({"run": "r", "causes": [{"rule": None}]}),
    "error not a string": json.dumps({"run": "r", "error": 5}),
    "nested run": '{"run": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}",
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_batch_refuses_a_results_line_it_cannot_validate(tmp_path: Path, kind: str) -> None:
    good_log(tmp_path / "runs" / "r1")
    results = tmp_path / "results.jsonl"
    text = json.dumps({"run": "earlier", "error": "kept"}) + "\n" + CORRUPT[kind] + "\n"
    results.write_text(text)
    outcome = cli(["batch", "-o", str(results), str(tmp_path / "runs")], seconds=30).check(2, 30)
    report(f"batch resume, {kind}", outcome)
    assert outcome.stderr.splitlines() == [f"rltriage: {results}:2: not a batch result line; refusing to write to this file"]
    assert results.read_text() == text  # not appended to, not cut
