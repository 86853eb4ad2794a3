"""Make a TRL run prove its own boundary: stage markers, reward timings and a stall watchdog.

Usage::

    from rltriage.integrations.trl import RltriageCallback, instrument, install_stall_watchdog

    install_stall_watchdog(600)             # dump every thread's stack when no step completes in 10 min
    trainer = GRPOTrainer(..., callbacks=[RltriageCallback()])
    instrument(trainer)                     # reward and first-generation markers
    trainer.train()

Every marker is one line in the stable format `[rltriage] stage=<stage> step=<n> seconds=<x>`
(`rltriage.base.markers`, which `signatures/rltriage/stage_marker.yaml` recognises), so `rltriage diagnose` can tell exactly which stage
of step 0 never returned, and the watchdog's faulthandler dump shows the call that did not.
"""

from __future__ import annotations

import faulthandler
import functools
import inspect
import io
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, TextIO

from ..base.markers import format_marker

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "rltriage.integrations.trl needs transformers and trl, which the optional extra installs: pip install 'rltriage[trl]'"
    ) from exc

__all__ = [
    "RltriageCallback",
    "StallWatchdog",
    "emit_marker",
    "install_stall_watchdog",
    "instrument",
]

LOGGER_NAME = "rltriage"
logger = logging.getLogger(LOGGER_NAME)

# Marks wrappers so that calling `instrument` twice does not nest them and double every marker.
_WRAPPED_ATTR = "__rltriage_wrapped__"

# Generation methods in preference order: `_generate` (trl >= 0.23) is generation alone; older releases
# only have `_generate_and_score_completions`, which also scores, so there the first reward call
# closes the generation stage instead (see `_GenerationState`).
_GENERATION_METHODS = ("_generate", "_generate_and_score_completions")


def emit_marker(
    stage: str,
    step: int | None = None,
    seconds: float | None = None,
    *,
    stream: TextIO | None = None,
    **extra: object,
) -> str:
    """Write one marker and return it.

    Through the `rltriage` logger when it would emit INFO records (the script configured logging);
    otherwise printed to stderr and flushed, because a script that never configured logging would
    drop INFO records and a hung run must still leave the line behind.
    """
    line = format_marker(stage, step, seconds, **extra)
    if stream is None and logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info(line)
    else:
        target = stream if stream is not None else sys.stderr
        print(line, file=target, flush=True)
    return line


@dataclass
class StallWatchdog:
    """A faulthandler timer that dumps every thread's stack whenever `seconds` pass without a step."""

    seconds: float
    file: IO[str] | IO[bytes]

    def arm(self) -> None:
        # Re-arming replaces the pending timer, which is exactly "the clock restarts at each step".
        faulthandler.dump_traceback_later(self.seconds, repeat=True, file=self.file)

    def cancel(self) -> None:
        faulthandler.cancel_dump_traceback_later()


_watchdog: StallWatchdog | None = None
_watchdog_lock = threading.Lock()


def _usable_file(file: IO[str] | IO[bytes] | None) -> IO[str] | IO[bytes]:
    # faulthandler writes to the raw descriptor from a C thread: an object without a real fileno
    # (pytest's capture, a notebook's stream) cannot take the dump, so fall back to the process's stderr.
    candidate: IO[str] | IO[bytes] | None = file if file is not None else sys.stderr
    try:
        if candidate is not None:
            candidate.fileno()
            return candidate
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    if sys.__stderr__ is None:
        raise RuntimeError("install_stall_watchdog: no file with a descriptor to write the stack dump to")
    return sys.__stderr__


def install_stall_watchdog(seconds: float, *, file: IO[str] | IO[bytes] | None = None) -> StallWatchdog:
    """Dump every thread's stack to `file` (default stderr) each `seconds` until a step completes.

    `RltriageCallback` re-arms the timer after every completed step and cancels it when training
    ends, so a healthy run never dumps and a hung one repeats its stacks in faulthandler's format
    (`Timeout (0:10:00)!`, `Thread 0x… (most recent call first):`, `  File "…", line N in func`).
    Keep `file` open for as long as the watchdog is armed.
    """
    global _watchdog
    if seconds <= 0:
        raise ValueError("install_stall_watchdog: seconds must be positive")
    watchdog = StallWatchdog(float(seconds), _usable_file(file))
    with _watchdog_lock:
        if _watchdog is not None:
            _watchdog.cancel()
        _watchdog = watchdog
        watchdog.arm()
    # Not a stage marker (no `stage=`): it only tells a reader why stack dumps may follow.
    print(f"[rltriage] stall watchdog armed: stacks dump after {seconds:g} s without a step", file=sys.stderr, flush=True)
    return watchdog


def current_watchdog() -> StallWatchdog | None:
    return _watchdog


def _rearm_watchdog() -> None:
    with _watchdog_lock:
        if _watchdog is not None:
            _watchdog.arm()


def _cancel_watchdog() -> None:
    with _watchdog_lock:
        if _watchdog is not None:
            _watchdog.cancel()


def _current_step(trainer: Any) -> int:
    state = getattr(trainer, "state", None)
    step = getattr(state, "global_step", 0)
    return step if isinstance(step, int) else 0


class _GenerationState:
    """Tracks the first generation so its markers appear exactly once per trainer."""

    def __init__(self) -> None:
        self.started_at: float | None = None
        self.finished = False
        self.lock = threading.Lock()

    def start(self, step: int, stream: TextIO | None) -> bool:
        with self.lock:
            if self.started_at is not None:
                return False
            self.started_at = time.monotonic()
        emit_marker("first_generation_started", step, stream=stream)
        return True

    def finish(self, step: int, stream: TextIO | None) -> None:
        with self.lock:
            if self.started_at is None or self.finished:
                return
            self.finished = True
            elapsed = time.monotonic() - self.started_at
        emit_marker("first_generation_finished", step, elapsed, stream=stream)


def _wrap_reward(
    func: Callable[..., Any],
    name: str,
    trainer: Any,
    generation: _GenerationState,
    stream: TextIO | None,
) -> Callable[..., Any]:
    def before() -> tuple[int, float]:
        step = _current_step(trainer)
        # Rewards run only after the rollout returned, so the first call closes the generation stage
        # even where the wrapped method also scores (older trl).
        generation.finish(step, stream)
        emit_marker("reward_started", step, stream=stream, reward=name)
        return step, time.monotonic()

    def after(step: int, started: float) -> None:
        emit_marker("reward_computed", step, time.monotonic() - started, stream=stream, reward=name)

    # The wrappers' code names show in stack dumps: they name the reward call even when the reward
    # itself is a C extension with no Python frame of its own.
    wrapper: Callable[..., Any]
    if _is_async(func):

        async def rltriage_async_reward_call(*args: Any, **kwargs: Any) -> Any:
            step, started = before()
            result = await func(*args, **kwargs)
            after(step, started)
            return result

        wrapper = rltriage_async_reward_call
    else:

        def rltriage_reward_call(*args: Any, **kwargs: Any) -> Any:
            step, started = before()
            result = func(*args, **kwargs)
            after(step, started)
            return result

        wrapper = rltriage_reward_call
    # TRL names its `rewards/<name>` metrics after the callable; keep the user's name, not the wrapper's.
    functools.update_wrapper(wrapper, func, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
    if not hasattr(func, "__name__"):
        wrapper.__name__ = name
        wrapper.__qualname__ = name
    setattr(wrapper, _WRAPPED_ATTR, True)
    return wrapper


def _is_async(func: Callable[..., Any]) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _callable_name(func: Callable[..., Any]) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    return str(getattr(func, "__name__", type(func).__name__))


def _wrap_generation(trainer: Any, method_name: str, generation: _GenerationState, stream: TextIO | None) -> None:
    original: Callable[..., Any] = getattr(trainer, method_name)
    if getattr(original, _WRAPPED_ATTR, False):
        return

    @functools.wraps(original)
    def rltriage_generation_call(*args: Any, **kwargs: Any) -> Any:
        step = _current_step(trainer)
        generation.start(step, stream)
        result = original(*args, **kwargs)
        if method_name == "_generate":
            generation.finish(step, stream)
        return result

    setattr(rltriage_generation_call, _WRAPPED_ATTR, True)
    # An instance attribute shadows the class method, so only this trainer is instrumented.
    setattr(trainer, method_name, rltriage_generation_call)


def instrument(trainer: Any, *, stream: TextIO | None = None) -> RltriageCallback:
    """Wrap a (GRPO-like) trainer's reward functions and generation so they write stage markers.

    Reward functions that are plain callables (sync or async) are wrapped to write `reward_started` /
    `reward_computed … seconds=…`; reward models (`torch.nn.Module`) are left alone because TRL
    calls them through their forward with tokenised inputs. Adds an `RltriageCallback` unless the
    trainer has one, and returns it.
    """
    generation = _GenerationState()
    funcs = getattr(trainer, "reward_funcs", None)
    if isinstance(funcs, list):
        for index, func in enumerate(funcs):
            if not callable(func) or getattr(func, _WRAPPED_ATTR, False) or _is_torch_module(func):
                continue
            funcs[index] = _wrap_reward(func, _callable_name(func), trainer, generation, stream)
    for method_name in _GENERATION_METHODS:
        if hasattr(trainer, method_name):
            _wrap_generation(trainer, method_name, generation, stream)
            break
    callback = _find_callback(trainer)
    if callback is None:
        callback = RltriageCallback(stream=stream)
        add = getattr(trainer, "add_callback", None)
        if callable(add):
            add(callback)
    return callback


def _is_torch_module(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _find_callback(trainer: Any) -> RltriageCallback | None:
    handler = getattr(trainer, "callback_handler", None)
    for callback in getattr(handler, "callbacks", []) or []:
        if isinstance(callback, RltriageCallback):
            return callback
    return None


class RltriageCallback(TrainerCallback):  # type: ignore[misc]
    """Writes `trainer_started` and one `step_completed step=N seconds=X` per step; drives the watchdog."""

    def __init__(self, *, stream: TextIO | None = None) -> None:
        self.stream = stream
        self._step_started: float | None = None
        self._train_started: float | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._train_started = time.monotonic()
        # Model loading and setup are behind us: the stall clock starts at the training loop.
        _rearm_watchdog()
        emit_marker("trainer_started", state.global_step, stream=self.stream)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        started = self._step_started if self._step_started is not None else self._train_started
        seconds = time.monotonic() - started if started is not None else None
        self._step_started = None
        _rearm_watchdog()
        emit_marker("step_completed", state.global_step, seconds, stream=self.stream)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        # Evaluation, saving and shutdown after the loop are not steps; a dump there would be noise.
        _cancel_watchdog()
