"""The one file-type table."""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from rltriage.inputs.filetypes import inner_name, is_archive_candidate, is_log, is_run_archive, suffix


def test_logs_compressed_or_not() -> None:
    assert is_log("rank0.log") and is_log("worker-1.ERR.gz") and is_log("train.txt.zst")
    assert not is_log("config.yaml") and not is_log("run.tar.gz")


def test_archives() -> None:
    for name in ("run.tar", "run.tgz", "run.tar.zst", "logs.zip", "rank0.log.gz", "x.tzst"):
        assert is_archive_candidate(name), name
    assert is_run_archive("run.tar.zstd") and is_run_archive("RUN.TBZ2") and not is_run_archive("rank0.log.gz")
    assert not is_archive_candidate("train.log")


def test_what_a_compressed_file_holds() -> None:
    assert inner_name("rank0.log.gz") == "rank0.log"
    assert inner_name("run.tgz") == "run.tar" and inner_name("Run.TZST") == "Run.tar"
    assert inner_name("train.log") == "train.log"


@given(st.text(alphabet="ab./ ", max_size=12))
def test_suffix_is_the_suffix_pathlib_gives(name: str) -> None:
    assert suffix(name) == PurePosixPath(name.lower()).suffix


def test_suffix_of_names_seen_in_runs() -> None:
    assert suffix("Rank0.LOG") == ".log" and suffix("run.tar.gz") == ".gz" and suffix("logs/worker.err") == ".err"
    assert suffix(".bashrc") == "" and suffix("name.") == "" and suffix("stdout") == "" and suffix("dir.d/") == ".d"
