"""The first-step debugger's smoke-test reduction, in one table: what to reduce, the keys trainers
use for it, and the value. The diagnosis's smoke-test plan lists it with the run's own keys;
`rltriage smoke` rewrites a config with it (and keeps each trainer's batch contracts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reduction:
    concept: str
    keys: tuple[str, ...]  # the spellings trainers use, in the order they are looked for
    value: object
    always: bool = False  # listed in a diagnosis's plan even when the run names none of the keys


SMOKE_REDUCTION: tuple[Reduction, ...] = (
    Reduction("num_generations", ("num_generations", "rollout.n", "group_size", "n_samples_per_prompt"), 2, always=True),
    Reduction("max_completion_length", ("max_completion_length", "max_response_length", "max_tokens", "generate_max_len"), 128, always=True),
    Reduction("per_device_train_batch_size", ("per_device_train_batch_size", "train_batch_size", "rollout_batch_size", "batch_per_replica"), 2),
    Reduction("gradient_accumulation_steps", ("gradient_accumulation_steps",), 1),
    Reduction(
        "max_steps",
        ("max_steps", "total_training_steps", "num_steps", "total_steps", "num_train_steps", "train_steps", "max_train_steps"),
        1,
        always=True,
    ),
    Reduction("eval_strategy", ("eval_strategy", "evaluation_strategy", "test_freq", "val_before_train"), "no"),
)


def reduction(concept: str) -> Reduction:
    return next(r for r in SMOKE_REDUCTION if r.concept == concept)


# The values `rltriage smoke` builds its contracts on.
GROUP = int(reduction("num_generations").value)  # type: ignore[call-overload]
COMPLETION_TOKENS = int(reduction("max_completion_length").value)  # type: ignore[call-overload]
STEP_KEYS = reduction("max_steps").keys
