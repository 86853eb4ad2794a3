"""Archives and compressed logs are read as streams, cited as `archive!member:line`."""

from __future__ import annotations

import builtins
import bz2
import gzip
import io
import lzma
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rltriage import KnowledgeBase
from rltriage.base.vocabulary import InputKind
from rltriage.inputs import archives
from rltriage.inputs import discover as inputs
from rltriage.pipeline.run import Analysis, analyse

try:
    import zstandard
except ImportError:  # pragma: no cover - the dev venv has it
    zstandard = None  # type: ignore[assignment]

needs_zstd = pytest.mark.skipif(zstandard is None, reason="zstandard not installed")

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free."
)
MARKER = "[rltriage] stage=first_generation_started step=0"
RANK3 = "\n".join(["starting rank 3", "loading model", MARKER, "generating", OOM, "exiting"]) + "\n"
MARKER_LINE, OOM_LINE = 3, 5
DRIVER = "driver started\nall ranks launched\n"


def tar_bytes(files: dict[str, bytes], compress: Callable[[bytes], bytes] = lambda b: b) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return compress(buffer.getvalue())


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def zstd(data: bytes) -> bytes:
    assert zstandard is not None
    return zstandard.ZstdCompressor().compress(data)


RUN = {"logs/rank3.log": RANK3.encode(), "driver.log": DRIVER.encode()}


def scan_of(analysis: Analysis, path: str) -> Any:
    found = [s for s in analysis.scans if s.path == path]
    assert found, f"{path} not among {[s.path for s in analysis.scans]}"
    return found[0]


def cited_lines(scan: Any) -> dict[str, set[int]]:
    """signature id -> lines cited for it in this file."""
    cited: dict[str, set[int]] = {}
    for tally in scan.tallies.values():
        for record in (tally.first, *tally.samples, tally.last):
            if record is not None:
                cited.setdefault(tally.signature, set()).add(record.line)
    return cited


def assert_rank3_cited(analysis: Analysis, display: str) -> None:
    scan = scan_of(analysis, display)
    assert scan.kind is InputKind.rank_log  # classified by the member's own name
    assert scan.lines == RANK3.count("\n")
    assert MARKER_LINE in cited_lines(scan)["rltriage.stage_marker"]
    # The knowledge base may not know this OOM message yet; when it does, the line must be right.
    for tally in scan.tallies.values():
        if tally.first is not None and "OutOfMemoryError" in tally.first.text:
            assert tally.first.line == OOM_LINE


FORMATS: dict[str, Callable[[dict[str, bytes]], bytes]] = {
    "run.tar": lambda f: tar_bytes(f),
    "run.tar.gz": lambda f: tar_bytes(f, gzip.compress),
    "run.tgz": lambda f: tar_bytes(f, gzip.compress),
    "run.tar.bz2": lambda f: tar_bytes(f, bz2.compress),
    "run.tar.xz": lambda f: tar_bytes(f, lzma.compress),
    "run.tar.zst": lambda f: tar_bytes(f, zstd),
    "run.zip": zip_bytes,
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_archive_members_are_cited_as_archive_bang_member(tmp_path: Path, kb: KnowledgeBase, name: str) -> None:
    if "zst" in name and zstandard is None:
        pytest.skip("zstandard not installed")
    (tmp_path / name).write_bytes(FORMATS[name](RUN))
    analysis = analyse([str(tmp_path)], kb=kb)
    display = f"{tmp_path / name}!logs/rank3.log"
    assert_rank3_cited(analysis, display)
    # Name order, not archive order: the order of an archive's members never changes the output.
    assert [i.path for i in analysis.diagnosis.inputs] == [f"{tmp_path / name}!driver.log", display]
    assert analysis.warnings == []
    assert not any(p.name != name for p in tmp_path.iterdir())  # nothing extracted


def test_evidence_path_cites_member_and_line(tmp_path: Path, kb: KnowledgeBase) -> None:
    (tmp_path / "x.tar.gz").write_bytes(tar_bytes(RUN, gzip.compress))
    analysis = analyse([str(tmp_path / "x.tar.gz")], kb=kb)
    scan = scan_of(analysis, f"{tmp_path / 'x.tar.gz'}!logs/rank3.log")
    marker = next(t for t in scan.tallies.values() if t.signature == "rltriage.stage_marker")
    assert marker.first is not None
    assert f"{scan.path}:{marker.first.line}" == f"{tmp_path}/x.tar.gz!logs/rank3.log:3"


@pytest.mark.parametrize(
    "suffix,compress",
    [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress), (".zst", None)],
)
def test_single_compressed_log(tmp_path: Path, kb: KnowledgeBase, suffix: str, compress: Callable[[bytes], bytes] | None) -> None:
    if compress is None:
        if zstandard is None:
            pytest.skip("zstandard not installed")
        compress = zstd
    path = tmp_path / f"rank3.log{suffix}"
    path.write_bytes(compress(RANK3.encode()))
    analysis = analyse([str(path)], kb=kb)
    assert_rank3_cited(analysis, str(path))  # cited as the file itself, classified as `rank3.log`
    assert analysis.warnings == []


def test_nested_archives_cite_the_whole_chain(tmp_path: Path, kb: KnowledgeBase) -> None:
    inner = tar_bytes({"rank0.log": RANK3.encode()}, gzip.compress)
    gz_log = gzip.compress(RANK3.encode())
    (tmp_path / "a.zip").write_bytes(zip_bytes({"inner.tar.gz": inner, "logs/rank1.log.gz": gz_log, "notes.txt": b"hi\n"}))
    analysis = analyse([str(tmp_path / "a.zip")], kb=kb)
    assert_rank3_cited(analysis, f"{tmp_path}/a.zip!inner.tar.gz!rank0.log")
    assert_rank3_cited(analysis, f"{tmp_path}/a.zip!logs/rank1.log.gz")
    assert [i.path.removeprefix(f"{tmp_path}/") for i in analysis.diagnosis.inputs] == [
        "a.zip!inner.tar.gz!rank0.log",
        "a.zip!logs/rank1.log.gz",
        "a.zip!notes.txt",
    ]


def test_tar_inside_tar_inside_gz(tmp_path: Path, kb: KnowledgeBase) -> None:
    level1 = tar_bytes({"deep/rank3.log": RANK3.encode()})
    level2 = tar_bytes({"level1.tar": level1}, bz2.compress)
    (tmp_path / "outer.tar.gz").write_bytes(tar_bytes({"level2.tar.bz2": level2}, gzip.compress))
    analysis = analyse([str(tmp_path)], kb=kb)
    assert_rank3_cited(analysis, f"{tmp_path}/outer.tar.gz!level2.tar.bz2!level1.tar!deep/rank3.log")


def test_members_share_one_sequential_reader(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives, "CACHE_LIMIT", 0)  # force re-reading instead of the in-memory copies
    restarts: list[str] = []
    original = archives.SharedArchive._restart

    def counting(self: archives.SharedArchive) -> None:
        restarts.append(self.display)
        original(self)

    monkeypatch.setattr(archives.SharedArchive, "_restart", counting)
    files = {f"logs/rank{i}.log": RANK3.encode() for i in range(6)}
    (tmp_path / "run.tar.gz").write_bytes(tar_bytes(files, gzip.compress))
    analysis = analyse([str(tmp_path)], kb=kb)
    assert len(analysis.scans) == 6
    assert restarts == [str(tmp_path / "run.tar.gz")]  # one decompression for all six members

    # Out of order still works, by starting over.
    restarts.clear()
    warnings: list[inputs.Warning] = []
    sources = inputs.discover([str(tmp_path)], warnings)
    texts = []
    for source in reversed(sources):
        with source.open() as stream:
            texts.append(stream.read())
    assert texts == [RANK3.encode()] * 6
    assert len(restarts) == 6


def test_truncated_tar_gz_warns_once_and_keeps_what_was_read(tmp_path: Path, kb: KnowledgeBase) -> None:
    big = ("filler line\n" * 50_000).encode()
    data = tar_bytes({"logs/rank3.log": RANK3.encode(), "logs/rank4.log": big, "logs/rank5.log": RANK3.encode()}, gzip.compress)
    path = tmp_path / "run.tar.gz"
    path.write_bytes(data[: len(data) // 2])
    analysis = analyse([str(tmp_path)], kb=kb)
    assert_rank3_cited(analysis, f"{path}!logs/rank3.log")
    assert len(analysis.warnings) == 1
    warning = analysis.warnings[0]
    assert warning.path.startswith(str(path))
    assert "truncated or corrupt" in warning.message and warning.message.endswith("diagnosed what could be read")
    assert "\n" not in str(warning)
    assert f"{path}!logs/rank5.log" not in [s.path for s in analysis.scans]


def test_truncated_single_gz_keeps_the_readable_part(tmp_path: Path, kb: KnowledgeBase) -> None:
    body = RANK3 + "".join(f"step {i}\n" for i in range(20_000))
    data = gzip.compress(body.encode())
    path = tmp_path / "rank3.log.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    analysis = analyse([str(path)], kb=kb)
    scan = scan_of(analysis, str(path))
    assert MARKER_LINE in cited_lines(scan)["rltriage.stage_marker"]
    assert 0 < scan.lines < body.count("\n")
    assert [(w.path, w.message) for w in analysis.warnings] == [
        (str(path), "truncated or corrupt (Compressed file ended before the end-of-stream marker was reached); diagnosed what could be read")
    ]


def test_corrupt_zip_is_one_warning(tmp_path: Path, kb: KnowledgeBase) -> None:
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04" + b"\xff" * 200)
    (tmp_path / "good.log").write_text(RANK3)
    analysis = analyse([str(tmp_path)], kb=kb)
    assert [i.path for i in analysis.diagnosis.inputs] == [str(tmp_path / "good.log")]
    assert len(analysis.warnings) == 1 and analysis.warnings[0].path == str(tmp_path / "bad.zip")
    assert "truncated or corrupt" in analysis.warnings[0].message


def test_archive_suffix_on_plain_text_is_read_as_text(tmp_path: Path, kb: KnowledgeBase) -> None:
    (tmp_path / "rank3.log.gz").write_text(RANK3)  # named like gzip, is not
    analysis = analyse([str(tmp_path)], kb=kb)
    assert_rank3_cited(analysis, str(tmp_path / "rank3.log.gz"))


def test_missing_zstandard_warns_once(tmp_path: Path, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 600)
    (tmp_path / "b.log.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 600)
    (tmp_path / "good.log").write_text(RANK3)
    real_import = builtins.__import__

    def no_zstd(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "zstandard":
            raise ImportError("No module named 'zstandard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstd)
    analysis = analyse([str(tmp_path)], kb=kb)
    a, b = str(tmp_path / "a.tar.zst"), str(tmp_path / "b.log.zst")
    assert [(w.path, w.message) for w in analysis.warnings] == [(a, f"zstandard not installed; skipped {a}, {b}")]
    assert [i.path for i in analysis.diagnosis.inputs] == [str(tmp_path / "good.log")]


def test_member_names_are_display_text_only(tmp_path: Path, kb: KnowledgeBase) -> None:
    files = {"../../escape/rank3.log": RANK3.encode(), "/abs/driver.log": DRIVER.encode(), "bad\nname.log": b"x\n"}
    (tmp_path / "evil.tar").write_bytes(tar_bytes(files))
    work = tmp_path / "work"
    work.mkdir()
    analysis = analyse([str(tmp_path / "evil.tar")], kb=kb)
    assert_rank3_cited(analysis, f"{tmp_path}/evil.tar!../../escape/rank3.log")
    assert [i.path for i in analysis.diagnosis.inputs][1:] == [f"{tmp_path}/evil.tar!/abs/driver.log", f"{tmp_path}/evil.tar!bad?name.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar", "work"]
    assert not Path("/abs/driver.log").exists() and not (tmp_path.parent.parent / "escape").exists()


def test_bomb_inside_zip_and_tar_is_stopped(tmp_path: Path, kb: KnowledgeBase) -> None:
    zeros = b"\x00" * (80 << 20)  # deflates ~1000x; stopped at 64 MiB, before the end
    (tmp_path / "z.zip").write_bytes(zip_bytes({"rank0.log": RANK3.encode(), "bomb.log": zeros}))
    (tmp_path / "t.tar").write_bytes(tar_bytes({"bomb.log.gz": gzip.compress(zeros, 1), "rank3.log": RANK3.encode()}))
    analysis = analyse([str(tmp_path)], kb=kb)
    assert [(w.path, w.message.split(":")[0]) for w in analysis.warnings] == [
        (f"{tmp_path}/t.tar!bomb.log.gz", "decompression stopped past 64 MiB"),
        (f"{tmp_path}/z.zip!bomb.log", "decompression stopped past 64 MiB"),
        (f"{tmp_path}/t.tar!bomb.log.gz", "skipped"),  # what was read of it is zeros: binary
        (f"{tmp_path}/z.zip!bomb.log", "skipped"),
    ]
    assert_rank3_cited(analysis, f"{tmp_path}/z.zip!rank0.log")
    assert_rank3_cited(analysis, f"{tmp_path}/t.tar!rank3.log")  # the member after the bomb is still read


def test_corrupt_member_does_not_end_the_archive(tmp_path: Path, kb: KnowledgeBase) -> None:
    broken = gzip.compress(b"x" * 5000)[:40] + b"\xff" * 600  # gzip header, then garbage
    (tmp_path / "run.tar").write_bytes(tar_bytes({"a/rank1.log.gz": broken, "logs/rank3.log": RANK3.encode()}))
    analysis = analyse([str(tmp_path)], kb=kb)
    assert len(analysis.warnings) == 1
    assert analysis.warnings[0].path == f"{tmp_path}/run.tar!a/rank1.log.gz"
    assert analysis.warnings[0].message.startswith("truncated or corrupt (")
    assert_rank3_cited(analysis, f"{tmp_path}/run.tar!logs/rank3.log")
