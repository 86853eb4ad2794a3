"""Hostile inputs: each gives one clear warning naming the file, the rest is still diagnosed, and
nothing hangs (every test runs under a wall-clock bound)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import signal
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

from rltriage import KnowledgeBase
from rltriage.cli import main
from rltriage.inputs import archives
from rltriage.inputs import discover as inputs
from rltriage.pipeline.read import read_source
from rltriage.pipeline.run import Analysis, analyse
from rltriage.pipeline.scan import scanner_for

T = TypeVar("T")

MARKER = "[rltriage] stage=first_generation_started step=0"
GOOD = f"starting\n{MARKER}\ndone\n"


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts even a blocking open() of a FIFO."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"did not finish within {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def bounded(call: Callable[[], T], seconds: int = 10) -> T:
    with deadline(seconds):
        return call()


def run(paths: list[Path], kb: KnowledgeBase, seconds: int = 10) -> Analysis:
    return bounded(lambda: analyse([str(p) for p in paths], kb=kb), seconds)


def good_log(folder: Path) -> Path:
    path = folder / "good.log"
    path.write_text(GOOD)
    return path


def messages(analysis: Analysis) -> list[tuple[str, str]]:
    return [(w.path, w.message) for w in analysis.warnings]


def input_paths(analysis: Analysis) -> list[str]:
    return [i.path for i in analysis.diagnosis.inputs]


def assert_good_diagnosed(analysis: Analysis, good: Path) -> None:
    assert str(good) in input_paths(analysis)
    scan = next(s for s in analysis.scans if s.path == str(good))
    assert any(t.signature == "rltriage.stage_marker" and t.first is not None and t.first.line == 2 for t in scan.tallies.values())


def test_binary_file_with_nul_bytes(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    (tmp_path / "core.log").write_bytes(b"\x7fELF\x00\x00\x01" * 5000)
    analysis = run([tmp_path], kb)
    assert messages(analysis) == [(str(tmp_path / "core.log"), "skipped: binary content")]
    assert_good_diagnosed(analysis, good)


def test_invalid_utf8_and_mixed_encodings(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    mixed = tmp_path / "mixed.log"
    head = "café ok\n".encode()
    mixed.write_bytes(head + "naïve latin-1\n".encode("latin-1") + f"{MARKER}\n".encode() + b"\xff\xfe tail\n")
    analysis = run([tmp_path], kb)
    offset = len(head) + len("na")
    assert messages(analysis) == [(str(mixed), f"not valid UTF-8 (first bad byte at offset {offset}); undecodable bytes read as U+FFFD")]
    scan = next(s for s in analysis.scans if s.path == str(mixed))
    assert any(t.first is not None and t.first.line == 3 for t in scan.tallies.values())  # still matched after the bad bytes
    assert_good_diagnosed(analysis, good)


def test_utf8_character_split_across_reads_is_valid(tmp_path: Path, kb: KnowledgeBase) -> None:
    # 8192 is the sniff size: put a two-byte character across that boundary.
    path = tmp_path / "split.log"
    path.write_bytes(b"a" * 8191 + "é\n".encode() + f"{MARKER}\n".encode())
    analysis = run([path], kb)
    assert messages(analysis) == []


def test_crlf_is_read_silently_with_right_line_numbers(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "windows.log"
    path.write_bytes(GOOD.replace("\n", "\r\n").encode())
    analysis = run([path], kb)
    assert messages(analysis) == []  # CRLF loses nothing: no warning
    assert_good_diagnosed_at(analysis, path, 2)
    scan = analysis.scans[0]
    assert all("\r" not in (t.first.text if t.first else "") for t in scan.tallies.values())


def assert_good_diagnosed_at(analysis: Analysis, path: Path, line: int) -> None:
    scan = next(s for s in analysis.scans if s.path == str(path))
    assert any(t.signature == "rltriage.stage_marker" and t.first is not None and t.first.line == line for t in scan.tallies.values())


def test_bare_carriage_returns_are_line_breaks(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "oldmac.log"
    path.write_bytes(GOOD.replace("\n", "\r").encode())
    analysis = run([path], kb)
    assert messages(analysis) == [(str(path), "lines end in bare carriage returns (\\r); read them as line breaks")]
    assert analysis.scans[0].lines == 3
    assert_good_diagnosed_at(analysis, path, 2)


def test_single_200_mb_line_stays_bounded(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "oneline.log"
    block = b"x" * (1 << 20)
    with open(path, "wb") as handle:
        handle.write(MARKER.encode() + b" ")
        for _ in range(200):
            handle.write(block)
        handle.write(b"\nlast line\n")
    started = time.monotonic()
    tracemalloc.start()  # cheap here: the reads allocate few, large buffers
    try:
        analysis = run([path], kb, seconds=40)
        grown_mib = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert messages(analysis) == [(str(path), "line 1 is longer than 1 MiB; matched in pieces")]
    assert analysis.scans[0].lines == 2
    assert_good_diagnosed_at(analysis, path, 1)
    assert grown_mib < 32, f"peak memory grew by {grown_mib:.0f} MiB for a 200 MB line"
    print(f"200 MB line: {elapsed:.1f}s, peak memory +{grown_mib:.0f} MiB")


def test_empty_file_and_empty_folder(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "nothing").mkdir()
    analysis = run([tmp_path, tmp_path / "nothing"], kb)
    assert messages(analysis) == [
        (str(tmp_path / "nothing"), "folder holds no files"),
        (str(tmp_path / "empty.log"), "empty file"),
    ]
    assert input_paths(analysis) == [str(tmp_path / "empty.log"), str(good)]
    assert_good_diagnosed(analysis, good)


def test_unreadable_file(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    good = good_log(tmp_path)
    secret = tmp_path / "secret.log"
    secret.write_text(GOOD)
    secret.chmod(0)
    if os.access(secret, os.R_OK):  # root reads anything: simulate what any other user sees
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(secret) else real_access(p, mode, **kw))
    analysis = run([tmp_path], kb)
    assert messages(analysis) == [(str(secret), "skipped: permission denied")]
    assert input_paths(analysis) == [str(good)]


def test_unreadable_folder(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    good = good_log(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.log").write_text(GOOD)
    real_scandir = os.scandir

    def refusing(path: Any = ".") -> Any:
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    analysis = run([tmp_path], kb)
    assert messages(analysis) == [(str(locked), "cannot read folder: Permission denied")]
    assert input_paths(analysis) == [str(good)]


def test_broken_symlink_and_symlink_loop(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    (tmp_path / "broken.log").symlink_to(tmp_path / "gone.log")
    (tmp_path / "loop_a.log").symlink_to(tmp_path / "loop_b.log")
    (tmp_path / "loop_b.log").symlink_to(tmp_path / "loop_a.log")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path)  # a folder loop
    analysis = run([tmp_path, tmp_path / "loop_a.log"], kb)
    assert sorted(messages(analysis)) == [
        (str(tmp_path / "broken.log"), "skipped: broken symbolic link"),
        (str(tmp_path / "loop_a.log"), "skipped: symbolic link loop"),
        (str(tmp_path / "loop_b.log"), "skipped: symbolic link loop"),
        (str(tmp_path / "sub" / "up"), "symbolic link to a folder not followed"),
    ]
    assert input_paths(analysis) == [str(good)]


def test_fifo_is_never_opened(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    analysis = run([tmp_path, fifo], kb, seconds=5)  # opening it would block forever
    assert messages(analysis) == [(str(fifo), "skipped: a named pipe (FIFO), not a regular file")]
    assert input_paths(analysis) == [str(good)]


def test_device_files_are_never_opened(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    analysis = run([Path("/dev/zero"), good], kb, seconds=5)  # reading /dev/zero never ends
    assert messages(analysis) == [("/dev/zero", "skipped: a character device, not a regular file")]
    assert input_paths(analysis) == [str(good)]


def test_file_growing_while_read_is_read_to_its_size_when_found(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "live.log"
    path.write_text(GOOD)
    warnings: list[inputs.Warning] = []
    (source,) = inputs.discover([str(path)], warnings)
    with open(path, "a") as handle:
        handle.write("more\n" * 1000)
    scan, _ = bounded(lambda: read_source(source, scanner_for(kb), warnings))
    assert scan is not None and scan.lines == 3
    assert [str(w) for w in warnings] == [f"{path}: file grew while being read; read the first {len(GOOD)} bytes"]


def test_file_written_continuously_does_not_stall(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "live.log"
    path.write_text(GOOD * 10_000)
    stop = threading.Event()

    def writer() -> None:
        with open(path, "a") as handle:
            while not stop.is_set():
                handle.write(GOOD * 100)
                handle.flush()
                time.sleep(0.001)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        analysis = run([path], kb, seconds=15)
    finally:
        stop.set()
        thread.join()
    assert input_paths(analysis) == [str(path)]
    assert all("grew while being read" in m for _, m in messages(analysis))


def test_file_truncated_while_read(tmp_path: Path, kb: KnowledgeBase) -> None:
    path = tmp_path / "shrinking.log"
    path.write_text(GOOD * 100)
    warnings: list[inputs.Warning] = []
    (source,) = inputs.discover([str(path)], warnings)
    path.write_text(GOOD)
    scan, _ = bounded(lambda: read_source(source, scanner_for(kb), warnings))
    assert scan is not None and scan.lines == 3
    assert [str(w) for w in warnings] == [f"{path}: file shrank while being read: {len(GOOD)} of {len(GOOD) * 100} bytes read"]


def test_truncated_gz_and_zst(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    body = (GOOD + "".join(f"step {i} loss {i * 0.37:.4f}\n" for i in range(50_000))).encode()
    gz = gzip.compress(body)
    (tmp_path / "cut.log.gz").write_bytes(gz[: len(gz) // 2])
    expected = [(str(tmp_path / "cut.log.gz"), "truncated or corrupt (Compressed file ended before the end-of-stream marker was reached); diagnosed what could be read")]
    try:
        import zstandard
    except ImportError:
        zstandard = None  # type: ignore[assignment]
    if zstandard is not None:
        zst = zstandard.ZstdCompressor().compress(body)
        (tmp_path / "cut.log.zst").write_bytes(zst[: len(zst) // 2])
    analysis = run([tmp_path], kb)
    got = messages(analysis)
    assert got[0] == expected[0]
    if zstandard is not None:
        assert len(got) == 2 and got[1][0] == str(tmp_path / "cut.log.zst") and got[1][1].startswith("truncated or corrupt (")
    for name in ("cut.log.gz", "cut.log.zst") if zstandard is not None else ("cut.log.gz",):
        scan = next(s for s in analysis.scans if s.path == str(tmp_path / name))
        assert 0 < scan.lines < body.count(b"\n")  # what could be read was diagnosed
    assert_good_diagnosed(analysis, good)


def test_archive_with_parent_and_absolute_member_names(tmp_path: Path, kb: KnowledgeBase) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in ("../../../tmp/escaped.log", "/etc/cron.d/evil.log"):
            info = tarfile.TarInfo(name)
            info.size = len(GOOD)
            archive.addfile(info, io.BytesIO(GOOD.encode()))
    path = tmp_path / "evil.tar"
    path.write_bytes(buffer.getvalue())
    before = set(Path("/tmp").iterdir())
    analysis = run([path], kb)
    assert input_paths(analysis) == [f"{path}!../../../tmp/escaped.log", f"{path}!/etc/cron.d/evil.log"]
    assert messages(analysis) == []
    assert set(Path("/tmp").iterdir()) == before and not Path("/etc/cron.d/evil.log").exists()


def gzip_bomb(gib: int) -> bytes:
    # Concatenated gzip members decompress one after the other: 1 MiB of zeros compresses to ~1 KiB.
    member = gzip.compress(b"\x00" * (1 << 20), compresslevel=9)
    return member * (gib << 10)


def test_decompression_bomb_is_stopped_early(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip_bomb(4))  # 4 KiB per MiB: 4 GiB from 4 MiB
    started = time.monotonic()
    analysis = run([tmp_path], kb)
    assert time.monotonic() - started < 5
    assert messages(analysis)[0][0] == str(bomb)
    assert messages(analysis)[0][1].startswith("decompression stopped past 64 MiB: expands more than 200x (decompression bomb?)")
    assert_good_diagnosed(analysis, good)


def test_decompression_total_limit(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives, "TOTAL_LIMIT", 1 << 20)
    good = good_log(tmp_path)
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(GOOD.encode() * 20_000))  # 1.2 MB
    analysis = run([tmp_path], kb)
    assert messages(analysis) == [(str(tmp_path / "a.log.gz"), "decompression stopped: more than 1 MiB decompressed in total; diagnosed what could be read")]
    assert_good_diagnosed(analysis, good)
    assert_good_diagnosed_at(analysis, tmp_path / "a.log.gz", 2)


def nested_tars(depth: int) -> bytes:
    data = GOOD.encode()
    name = "rank0.log"
    for level in range(depth):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz" if level % 2 else "w") as archive:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        data, name = buffer.getvalue(), f"level{level}.tar" + (".gz" if level % 2 else "")
    return data


def test_archives_nested_20_deep(tmp_path: Path, kb: KnowledgeBase) -> None:
    good = good_log(tmp_path)
    (tmp_path / "deep.tar").write_bytes(nested_tars(20))
    (tmp_path / "ok.tar").write_bytes(nested_tars(9))  # the top file and 8 archives inside it
    analysis = run([tmp_path], kb)
    (warning,) = messages(analysis)
    assert warning[0].startswith(f"{tmp_path}/deep.tar!level18.tar!level17.tar.gz!") and warning[0].count("!") == 9
    assert warning[1] == "archives nested more than 8 deep; inner archive not read"
    assert not any(p.startswith(str(tmp_path / "deep.tar")) for p in input_paths(analysis))
    deepest = next(p for p in input_paths(analysis) if p.startswith(str(tmp_path / "ok.tar")))
    assert deepest.endswith("!rank0.log") and deepest.count("!") == 9
    assert_good_diagnosed(analysis, good)


def test_folder_with_100000_tiny_files(tmp_path: Path, kb: KnowledgeBase) -> None:
    root = tmp_path / "many"
    started = time.monotonic()
    for block in range(100):
        folder = root / f"d{block:03d}"
        folder.mkdir(parents=True)
        for i in range(1000):
            with open(folder / f"rank{i}.log", "wb") as handle:
                handle.write(b"tiny\n")
    made = time.monotonic() - started
    warnings: list[inputs.Warning] = []
    started = time.monotonic()
    sources = bounded(lambda: inputs.discover([str(root)], warnings), 20)
    found = time.monotonic() - started
    assert len(sources) == 100_000 and warnings == []
    ordered = sorted(sources, key=inputs.sort_key)
    assert ordered[0].display == str(root / "d000" / "rank0.log")
    # Reading them all is the pipeline's per-file cost; a sample shows each source works.
    scanner = scanner_for(kb)
    for source in ordered[:2000]:
        scan, _ = read_source(source, scanner, warnings)
        assert scan is not None and scan.lines == 1
    assert warnings == []
    print(f"100,000 files: created in {made:.1f}s, discovered in {found:.1f}s")
    assert found < 10


def test_missing_path_exits_2() -> None:
    result = bounded(lambda: CliRunner().invoke(main, ["diagnose", "/nope"]))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == "rltriage: /nope: no such file or folder"


def test_cli_warns_and_still_diagnoses(tmp_path: Path) -> None:
    good = good_log(tmp_path)
    (tmp_path / "core.bin").write_bytes(b"\x00" * 100)
    os.mkfifo(tmp_path / "pipe")
    result = bounded(lambda: CliRunner().invoke(main, ["diagnose", str(tmp_path), "--format", "json"]))
    assert result.exit_code == 0, result.output
    assert f"rltriage: warning: {tmp_path / 'core.bin'}: skipped: binary content" in result.output
    assert f"rltriage: warning: {tmp_path / 'pipe'}: skipped: a named pipe (FIFO), not a regular file" in result.output
    assert str(good) in result.output
