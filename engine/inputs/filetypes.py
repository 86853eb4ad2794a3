"""The one file-type table: what a file's name says it is, for discovery, archives, batch and smoke."""

from __future__ import annotations

# Compressed single files: the suffix and what removing it leaves (`rank0.log.gz` holds `rank0.log`).
COMPRESSION: dict[str, str] = {".gz": "", ".bz2": "", ".xz": "", ".zst": "", ".zstd": ""}
# Short names of compressed tars: the suffix and what the decompressed file is called.
COMPRESSED_TARS: dict[str, str] = {".tgz": ".tar", ".taz": ".tar", ".tbz": ".tar", ".tbz2": ".tar", ".txz": ".tar", ".tzst": ".tar"}
CONTAINERS = (".tar", ".zip")

# Log files: what a run folder holds directly, and what is read as a driver log.
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
# Ray's worker logs: `worker-….err` and `worker-….out`.
RAY_WORKER_SUFFIXES = {".err": "ray_worker_err", ".out": "ray_worker_out"}

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json",)
CONFIG_SUFFIXES = (*YAML_SUFFIXES, *JSON_SUFFIXES, ".toml")
# Launch scripts and argument files (`--flag value`, Hydra `a.b=value`).
SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".slurm", ".sbatch")
ARGS_SUFFIXES = (*SCRIPT_SUFFIXES, ".txt", ".args", ".cmd")

# Every name that may be an archive or a compressed file; only these are opened while discovering.
ARCHIVE_SUFFIXES = (*CONTAINERS, *COMPRESSED_TARS, *COMPRESSION)
# A whole run packed into one file.
RUN_ARCHIVE_SUFFIXES = (*CONTAINERS, *COMPRESSED_TARS, *(".tar" + suffix for suffix in COMPRESSION))


def suffix(name: str) -> str:
    """The last suffix of a file name, lower case (`''` for none), as `PurePosixPath(name).suffix`
    has it. Worked out on the string: a PurePath interns every name it parses, and the table of
    interned strings keeps the size that 100,000 file names gave it."""
    parts = [part for part in name.lower().split("/") if part and part != "."]
    last = parts[-1] if parts else ""
    dot = last.rfind(".")
    return last[dot:] if 0 < dot < len(last) - 1 else ""


def is_archive_candidate(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def is_run_archive(name: str) -> bool:
    return name.lower().endswith(RUN_ARCHIVE_SUFFIXES)


def is_log(name: str) -> bool:
    """A log file by its name, compressed or not (`rank0.log`, `worker-1.err.gz`)."""
    lowered = name.lower()
    for compressed in COMPRESSION:
        if lowered.endswith(compressed):
            lowered = lowered[: -len(compressed)]
            break
    return lowered.endswith(LOG_SUFFIXES)


def inner_name(name: str) -> str:
    """`rank0.log.gz` holds `rank0.log`, `run.tgz` holds `run.tar`: what classification should see."""
    lowered = name.lower()
    for compressed, replacement in (*COMPRESSION.items(), *COMPRESSED_TARS.items()):
        if lowered.endswith(compressed):
            return name[: -len(compressed)] + replacement
    return name
