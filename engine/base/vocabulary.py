"""The fixed vocabulary shared by the knowledge base, the engine and the output contract."""

from __future__ import annotations

from enum import Enum


class Bucket(str, Enum):
    # The nine stall buckets, in the order of the first-step hang debugger.
    rollout_hang = "rollout_hang"
    distributed_sync = "distributed_sync"
    kernel_runtime = "kernel_runtime"
    generation_settings = "generation_settings"
    multimodal_path = "multimodal_path"
    reward_blocking = "reward_blocking"
    remote_eval_blocking = "remote_eval_blocking"
    dataloader_stall = "dataloader_stall"
    vram_pressure = "vram_pressure"
    # Buckets for failures that are not first-step stalls.
    config_error = "config_error"
    slow_path = "slow_path"
    cluster_infra = "cluster_infra"
    training_signal = "training_signal"
    eval_scoring = "eval_scoring"


STALL_BUCKETS: tuple[Bucket, ...] = tuple(Bucket)[:9]

BUCKET_TITLES: dict[Bucket, str] = {
    Bucket.rollout_hang: "trainer rollout hang",
    Bucket.distributed_sync: "distributed / accelerate synchronization hang",
    Bucket.kernel_runtime: "kernel / host runtime incompatibility",
    Bucket.generation_settings: "pathological generation settings",
    Bucket.multimodal_path: "multimodal model path causing trainer issues",
    Bucket.reward_blocking: "reward function call blocking",
    Bucket.remote_eval_blocking: "remote evaluator blocking",
    Bucket.dataloader_stall: "dataloader / collator stall",
    Bucket.vram_pressure: "VRAM pressure / memory thrash",
    Bucket.config_error: "configuration contract violated",
    Bucket.slow_path: "slow path (progressing, not deadlocked)",
    Bucket.cluster_infra: "cluster, container or scheduler infrastructure",
    Bucket.training_signal: "training signal (reward / gradient) problem",
    Bucket.eval_scoring: "validation and evaluation scoring",
}


class Symptom(str, Enum):
    hang = "hang"
    oom = "oom"
    crash = "crash"
    error_at_startup = "error_at_startup"
    slow = "slow"
    wrong_result = "wrong_result"
    none = "none"


class InputKind(str, Enum):
    driver_log = "driver_log"
    rank_log = "rank_log"
    ray_worker_err = "ray_worker_err"
    ray_worker_out = "ray_worker_out"
    config = "config"
    env_report = "env_report"
    stack_dump = "stack_dump"
    other = "other"


# Kinds whose lines are scanned for signatures; configs and environment reports are parsed instead.
LOG_KINDS: frozenset[InputKind] = frozenset(
    {
        InputKind.driver_log,
        InputKind.rank_log,
        InputKind.ray_worker_err,
        InputKind.ray_worker_out,
        InputKind.stack_dump,
        InputKind.other,
    }
)


class Role(str, Enum):
    """What a rule is for; lint holds each rule to its role."""

    stage = "stage"  # derives stage facts (stage_seen, stage) from hits
    boundary = "boundary"  # derives the boundary or a symptom
    evidence = "evidence"  # concludes a cause of its own
    support = "support"  # adds weight (positive or negative) to another rule's cause
    contract = "contract"  # a config or environment contract; the only role that may be blocking
    guard = "guard"  # suppresses a bucket or cause, with the reason
    derive = "derive"  # other derivations other rules consume
    generic = "generic"  # a cause concluded from a failure's shape: exception family, package, message vocabulary
    fallback = "fallback"  # the cause of last resort for a failure no other rule explains


# Roles whose rules conclude a cause of their own.
CAUSE_ROLES: frozenset[Role] = frozenset({Role.evidence, Role.contract, Role.generic, Role.fallback})


class Status(str, Enum):
    stable = "stable"
    experimental = "experimental"
    deprecated = "deprecated"


class ValueType(str, Enum):
    str = "str"
    int = "int"
    float = "float"
    size = "size"
    version = "version"
    duration = "duration"
    # `KEY=value` pairs, a printed `os.environ` / `env_vars` dict, or `KEY set by environment to
    # value`: the pipeline turns each pair into an `env` fact (the hit keeps the mapping).
    env = "env"


class PatchKind(str, Enum):
    config = "config"
    env = "env"
    file = "file"
    command = "command"
    package = "package"


class Stage(str, Enum):
    """Stages of a run, in the order a healthy first step passes them."""

    model_loaded = "model_loaded"
    canary_generation = "canary_generation"
    trainer_started = "trainer_started"
    first_generation_started = "first_generation_started"
    first_generation_finished = "first_generation_finished"
    reward_computed = "reward_computed"
    weight_sync_started = "weight_sync_started"
    weight_sync_finished = "weight_sync_finished"
    first_step_completed = "first_step_completed"


# The stage a run must pass next after each stage. A canary generation and a weight sync only exist
# where the run logs them, so a run that never mentions them skips them.
NEXT_STAGE: dict[Stage, Stage | None] = {
    Stage.model_loaded: Stage.trainer_started,
    Stage.canary_generation: Stage.trainer_started,
    Stage.trainer_started: Stage.first_generation_started,
    Stage.first_generation_started: Stage.first_generation_finished,
    Stage.first_generation_finished: Stage.reward_computed,
    Stage.reward_computed: Stage.first_step_completed,
    Stage.weight_sync_started: Stage.weight_sync_finished,
    Stage.weight_sync_finished: Stage.first_step_completed,
    Stage.first_step_completed: None,
}

STAGE_ORDER: dict[Stage, int] = {stage: index for index, stage in enumerate(Stage, start=1)}


# Gaps in a run's evidence that make a diagnosis thin; catalog items of evidence to collect say
# which gap they fill (`gap:`), and the report lists them under "What to collect next".
class Gap(str, Enum):
    single_input = "single_input"  # one log file and nothing else
    no_stage_proof = "no_stage_proof"  # no stage was proven, so the boundary is unknown
    generic_cause = "generic_cause"  # the top cause was concluded from a failure's shape only
    no_env_report = "no_env_report"  # no pip freeze / collect_env / package versions
    no_rank_logs = "no_rank_logs"  # a failure names a rank whose own log is not among the inputs
    no_worker_logs = "no_worker_logs"  # a Ray driver log without the workers' .err files
    no_stacks = "no_stacks"  # a hang without a stack dump
    no_config = "no_config"  # no config values were found


GAP_TEXT: dict[Gap, str] = {
    Gap.single_input: "a single input file",
    Gap.no_stage_proof: "no stage was proven (the boundary is unknown)",
    Gap.generic_cause: "the top cause is concluded from the failure's shape alone",
    Gap.no_env_report: "no environment report (pip freeze / collect_env)",
    Gap.no_rank_logs: "a failure names a rank whose log is not among the inputs",
    Gap.no_worker_logs: "a Ray driver log without the workers' .err files",
    Gap.no_stacks: "a hang without a stack dump",
    Gap.no_config: "no config values were found",
}


# Fact types the pipeline asserts before any rule runs, with the fields they always carry.
BASE_FACTS: dict[str, tuple[str, ...]] = {
    "hit": ("signature", "path", "kind", "count", "line", "text", "rank", "ranks", "timestamp"),
    # Frame signatures' hits carry where in which stack they matched, besides the hit fields.
    "frame_hit": ("process", "thread", "main", "depth", "stack", "dump", "state"),
    "config": ("key", "name", "value", "path", "line", "source"),
    "package": ("name", "version", "path", "line"),
    "kernel": ("version", "path", "line"),
    # An environment variable the run had: from `env` / `printenv` output, an `os.environ` dict or
    # Ray's `runtime_env` printed in a log, `export` lines, NCCL's "set by environment" echoes.
    "env": ("name", "value", "path", "line", "source"),
    # A fact about the host other than the kernel: `driver` (NVIDIA driver), `cuda_runtime`,
    # `cuda_build` (CUDA torch was built with), `gpu`, `os`, `python`, `glibc`, from collect_env,
    # nvidia-smi headers and log banners.
    "system": ("name", "value", "path", "line"),
    "input": ("path", "kind", "lines"),
    "stage_def": ("name", "order", "next"),
    "stack": ("path", "process", "thread", "main", "kind", "top", "depth", "line", "stack"),
    "stack_outlier": ("path", "process", "thread", "top", "line", "majority_top", "majority_count", "total"),
    "run": ("mode", "inputs", "logs", "log_lines"),
    # An uncaught failure found in a log (inputs/failures.py): an exception with its frames, a C++
    # termination, a fatal signal or an exit code. `summary` is `qualname: message detail`; `trace`
    # the frames innermost first as `file:function`; `code` the source lines nearest the failure;
    # `terminal` whether it ends its exception chain;
    # `secondary` whether it only reports a failure raised elsewhere (launchers, Ray wrappers).
    "failure": (
        "kind", "type", "qualname", "wrapper", "message", "detail", "summary", "package", "packages", "trace", "code",
        "frame", "frame_function", "user_frame", "user_function", "signal", "exit_code", "process", "chain",
        "position", "root", "terminal", "secondary", "ignored", "count", "processes", "path", "line", "text",
    ),
}
