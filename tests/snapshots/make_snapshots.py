"""Record what the CLI prints for every fixture, so a refactoring can prove it changed nothing.

For each fixture run (a folder below fixtures/ holding expect.yaml) this records `diagnose` in the
three formats, `preflight` in two for preflight fixtures, and a few other commands (explain,
verify, smoke, rules list) on chosen fixtures. Each record holds the exit code, stdout and stderr.
The fixture's own path is replaced by `<fixture>`, so a fixture can move to another folder and
keep its snapshot (move the snapshot folder with it).

    RLTRIAGE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_snapshots.py   # rewrite them
    python tests/snapshots/make_snapshots.py                                    # the same

Reports are expected to change only on purpose; the test then shows the difference, and the
snapshots are regenerated in the same commit as the change that explains it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
SNAPSHOTS = Path(__file__).resolve().parent
EXPECT = "expect.yaml"

# Commands beyond diagnose/preflight: (fixture, snapshot name, arguments; {run} is the fixture's
# path and {file:NAME} one of its files).
EXTRA: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("trl/reward_never_returned", "explain.txt", ("explain", "{run}")),
    ("stacks/odd_rank_in_reward", "explain_odd_rank.txt", ("explain", "--cause", "stacks.odd_rank_out", "{run}")),
    ("vllm/rollout_hang_engine_idle", "explain_bucket.txt", ("explain", "--bucket", "rollout_hang", "{run}")),
    ("stages/clean_grpo_run", "verify.txt", ("verify", "{run}")),
    ("stages/clean_grpo_run", "verify.json", ("verify", "--format", "json", "{run}")),
    ("trl/reward_never_returned", "verify.txt", ("verify", "{run}")),
    ("trl/preflight_bad_config", "smoke.diff", ("smoke", "{file:config.yaml}")),
    ("stages/clean_grpo_run", "smoke.diff", ("smoke", "{file:grpo_config.yaml}")),
)
GLOBAL: tuple[tuple[str, tuple[str, ...]], ...] = (("rules_list.txt", ("rules", "list")),)
FORMATS = (("json", "json"), ("text", "txt"), ("markdown", "md"))


def fixture_runs() -> list[str]:
    """Fixture folders as paths relative to fixtures/, with `/` separators."""
    return sorted(p.parent.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob(EXPECT))


def _mode(folder: Path) -> str:
    for line in (folder / EXPECT).read_text(encoding="utf-8").splitlines():
        if line.startswith("mode:"):
            return line.split(":", 1)[1].split("#")[0].strip()
    return "diagnose"


def _inputs(folder: Path) -> list[str]:
    return [p.name for p in sorted(folder.iterdir()) if p.name != EXPECT]


def _invoke(args: list[str]) -> str:
    from click.testing import CliRunner

    from rltriage.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    return f"exit: {result.exit_code}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"


def _normalise(text: str, run: str) -> str:
    return text.replace(f"fixtures/{run}/", "<fixture>/").replace(f"fixtures/{run}", "<fixture>")


def _commands(run: str) -> Iterator[tuple[str, list[str]]]:
    folder = FIXTURES / run
    path = f"fixtures/{run}"
    for fmt, suffix in FORMATS:
        yield f"diagnose.{suffix}", ["diagnose", "--format", fmt, path]
    if _mode(folder) == "preflight":
        config, *rest = _inputs(folder)
        env = ["--env", f"{path}/{rest[0]}"] if rest else []
        for fmt, suffix in FORMATS[:2]:
            yield f"preflight.{suffix}", ["preflight", "--format", fmt, f"{path}/{config}", *env]
    for fixture, name, template in EXTRA:
        if fixture == run:
            args = [a.replace("{run}", path) for a in template]
            yield name, [f"{path}/{a[6:-1]}" if a.startswith("{file:") else a for a in args]


def record() -> dict[str, str]:
    """Every snapshot, by its path relative to tests/snapshots/. Run with the repository as cwd."""
    previous = os.getcwd()
    os.chdir(REPO)
    try:
        out: dict[str, str] = {}
        for run in fixture_runs():
            for name, args in _commands(run):
                out[f"{run}/{name}"] = _normalise(_invoke(args), run)
        for name, args in GLOBAL:
            out[f"_global/{name}"] = _invoke(list(args))
        return out
    finally:
        os.chdir(previous)


def stored() -> dict[str, str]:
    return {
        p.relative_to(SNAPSHOTS).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(SNAPSHOTS.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".txt", ".md", ".diff")
    }


def write(snapshots: dict[str, str]) -> None:
    for old in stored():
        if old not in snapshots:
            (SNAPSHOTS / old).unlink()
    for name, text in snapshots.items():
        target = SNAPSHOTS / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="")
    for folder in sorted((p for p in SNAPSHOTS.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    write(record())
