"""Running one hostile case under bounds: the command line in a forked child (cheap: the parent has
already imported rltriage and loaded the knowledge base), with a wall-clock limit, the peak memory
it added, its exit code and what it printed.

Memory is the child's peak resident set (`VmHWM`, reset when the child starts) minus what it
inherited, plus what a fresh `rltriage` process needs for a small run: the same figure a user
would see running the command on its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

RSS_LIMIT_MB = 200


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    rss_mb: float  # fresh-process equivalent: baseline + what this run added
    detail: str = ""  # how rss_mb was made, for a failing bound

    def check(self, code: int, seconds: float, rss_mb: float = RSS_LIMIT_MB) -> Outcome:
        assert self.code == code, f"exit {self.code}, expected {code}\nstdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"
        assert self.seconds < seconds, f"took {self.seconds:.1f}s, bound {seconds}s"
        assert self.rss_mb <= rss_mb, f"peak RSS {self.rss_mb:.0f} MB, bound {rss_mb} MB ({self.detail})"
        assert "Traceback (most recent call last)" not in self.stderr, self.stderr
        return self

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("rltriage: warning: ")]


def _status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {key: int(re.search(key + r":\s+(\d+)", text).group(1)) // 1024 for key in ("VmRSS", "VmHWM")}  # type: ignore[union-attr]


_BASELINE = """
import sys
from pathlib import Path
from rltriage.cli import main
try:
    main.main(args=["diagnose", sys.argv[1]], prog_name="rltriage", standalone_mode=False)
finally:
    status = Path("/proc/self/status").read_text()
    sys.stderr.write(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])
"""


@cache
def fresh_baseline_mb() -> float:
    """Peak RSS of a fresh `rltriage diagnose` of a three-line log, as the process itself sees it
    (VmHWM, which starts again at exec: the resource usage of a child would also count the pages it
    had as a fork of this test process before exec)."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "train.log"
        log.write_text("starting\n[rltriage] stage=first_generation_started step=0\ndone\n")
        proc = subprocess.run([sys.executable, "-c", _BASELINE, str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True, timeout=120)
    return int(proc.stderr.decode().strip().splitlines()[-1]) / 1024


def in_child(call: Callable[[], int], *, seconds: float, stdin: bytes | Path | None = None, cwd: Path | None = None) -> Outcome:
    """Run `call` (returning an exit code) in a forked child; its stdout and stderr are captured."""
    baseline = fresh_baseline_mb()
    with tempfile.TemporaryDirectory() as folder:
        out, err, peak = Path(folder) / "out", Path(folder) / "err", Path(folder) / "peak"
        source: Path | None = None
        if isinstance(stdin, bytes):
            source = Path(folder) / "in"
            source.write_bytes(stdin)
        elif isinstance(stdin, Path):
            source = stdin
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 99
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                with open("/proc/self/clear_refs", "w") as refs:
                    refs.write("5")  # the peak starts at what is resident now
                start = _status()["VmRSS"]
                if cwd is not None:
                    os.chdir(cwd)
                for fd, path, mode in ((0, source or Path(os.devnull), os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT), (2, err, os.O_WRONLY | os.O_CREAT)):
                    handle = os.open(path, mode, 0o600)
                    os.dup2(handle, fd)
                    os.close(handle)
                sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                try:
                    code = call()
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    code = 98
                sys.stdout.flush()
                sys.stderr.flush()
                end = _status()
                peak.write_text(f"{end['VmHWM'] - start} {start} {end['VmHWM']} {end['VmRSS']}")
            finally:
                os._exit(code)
        deadline = started + seconds
        while True:
            done, status, _usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.wait4(pid, 0)
                raise AssertionError(f"did not finish within {seconds}s; stderr so far: {err.read_text(errors='replace')[-2000:] if err.exists() else ''}")
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status)
        figures = peak.read_text().split() if peak.exists() else []
        added = float(figures[0]) if figures else float("inf")
        detail = f"baseline {baseline:.0f} MB + added {added:.0f} MB; child started at {figures[1] if figures else '?'} MB, peak {figures[2] if figures else '?'} MB"
        return Outcome(code, out.read_text(errors="replace"), err.read_text(errors="replace"), elapsed, baseline + added, detail)


def cli(args: Sequence[str], *, seconds: float = 30, stdin: bytes | Path | None = None, cwd: Path | None = None) -> Outcome:
    """`rltriage ARGS…` in a forked child."""
    from rltriage.cli import main

    def call() -> int:
        main.main(args=list(args), prog_name="rltriage", standalone_mode=True)
        return 0

    return in_child(call, seconds=seconds, stdin=stdin, cwd=cwd)


def report(name: str, outcome: Outcome) -> None:
    """One line per case with what it cost, shown with `pytest -s`."""
    print(f"[hostile] {name}: {outcome.seconds:.1f}s, {outcome.rss_mb:.0f} MB, exit {outcome.code}")

