"""The failure parser on the shapes real logs have."""

from __future__ import annotations

import pytest

from rltriage.inputs.failures import CUT_TYPE, ParsedFailure, package_of, parse_failures, signal_of_code


def parse(text: str) -> list[ParsedFailure]:
    return parse_failures(list(enumerate(text.splitlines(), start=1)))


def test_chained_traceback_keeps_both_exceptions_in_one_chain() -> None:
    failures = parse(
        """Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/urllib3/connection.py", line 174, in _new_conn
    conn = connection.create_connection(
OSError: [Errno 101] Network is unreachable

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/home/user/train.py", line 12, in <module>
    model = AutoModel.from_pretrained(name)
  File "/opt/venv/lib/python3.11/site-packages/transformers/utils/hub.py", line 441, in cached_file
    raise EnvironmentError(
OSError: We couldn't connect to 'https://huggingface.co' to load this file."""
    )
    assert [(f.type, f.position, f.link) for f in failures] == [("OSError", 0, None), ("OSError", 1, "cause")]
    first, last = failures
    assert first.chain == last.chain
    assert first.package == "urllib3" and first.frames[0].code == "conn = connection.create_connection("
    assert last.package == "transformers"
    assert last.user_frame is not None and last.user_frame.file == "/home/user/train.py" and last.user_frame.line == 12
    assert last.line == 13 and last.message.startswith("We couldn't connect")


def test_rank_prefixes_name_the_process_and_do_not_hide_frames() -> None:
    failures = parse(
        """[rank3]: Traceback (most recent call last):
[rank3]:   File "/work/grpo.py", line 88, in reward_fn
[rank3]:     return float(row["solution"])
[rank3]: KeyError: 'solution'"""
    )
    (failure,) = failures
    assert failure.process == "rank3"
    assert failure.type == "KeyError" and failure.message == "'solution'"
    assert [f.function for f in failure.frames] == ["reward_fn"]
    assert failure.frames[0].code == 'return float(row["solution"])'


def test_ray_prefixes_and_wrapped_exceptions() -> None:
    failures = parse(
        """(WorkerDict pid=2210, ip=10.0.0.3) Traceback (most recent call last):
(WorkerDict pid=2210, ip=10.0.0.3)   File "/opt/verl/verl/workers/fsdp_workers.py", line 701, in compute_log_prob
(WorkerDict pid=2210, ip=10.0.0.3)     output = self.actor.compute_log_prob(data=data)
(WorkerDict pid=2210, ip=10.0.0.3) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_compute_log_prob() (pid=2210, ip=10.0.0.3)"""
    )
    oom, wrapped = failures
    assert oom.process == "WorkerDict pid=2210"
    assert oom.type == "OutOfMemoryError" and oom.qualname == "torch.OutOfMemoryError"
    assert oom.package == "verl"  # a checkout of a known project, not site-packages
    assert wrapped.wrapper == "RayTaskError" and wrapped.type == "OutOfMemoryError"


def test_vllm_logger_headers_on_every_line() -> None:
    failures = parse(
        """ERROR 06-03 23:13:39 worker_base.py:148] Traceback (most recent call last):
ERROR 06-03 23:13:39 worker_base.py:148]   File "/usr/lib/python3.10/site-packages/vllm/worker/worker_base.py", line 140, in execute_method
ERROR 06-03 23:13:39 worker_base.py:148]     return executor(*args, **kwargs)
ERROR 06-03 23:13:39 worker_base.py:148] RuntimeError: NCCL error: unhandled system error"""
    )
    (failure,) = failures
    assert failure.package == "vllm" and failure.frames[0].function == "execute_method"
    assert failure.message == "NCCL error: unhandled system error"


def test_traceback_flattened_onto_one_line() -> None:
    (failure,) = parse(
        'Traceback (most recent call last): File "/home/u/run.py", line 3, in <module> main() '
        'File "/home/u/run.py", line 2, in main raise ValueError("bad") ValueError: num_generations must divide the batch'
    )
    assert failure.type == "ValueError" and failure.message == "num_generations must divide the batch"
    assert [f.function for f in failure.frames] == ["<module>", "main"]
    assert failure.frames[1].code == 'raise ValueError("bad")'


def test_windows_paths() -> None:
    (failure,) = parse(
        """Traceback (most recent call last):
  File "C:\\Users\\me\\miniconda3\\Lib\\site-packages\\torch\\cuda\\__init__.py", line 284, in _lazy_init
    raise AssertionError("Torch not compiled with CUDA enabled")
AssertionError: Torch not compiled with CUDA enabled"""
    )
    assert failure.package == "torch"
    assert package_of("C:\\Users\\me\\proj\\train.py") == "user"


def test_traceback_in_torchruns_failure_table() -> None:
    failures = parse(
        """Root Cause (first observed failure):
[0]:
  time      : 2024-11-04_11:52:44
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 2790)
  traceback : Traceback (most recent call last):
    File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 3579, in training_step
      loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  TypeError: PairwiseTrainer.compute_loss() got an unexpected keyword argument 'num_items_in_batch'
  ============================================================"""
    )
    (failure,) = [f for f in failures if f.kind == "exception"]
    assert failure.type == "TypeError" and failure.line == 10 and failure.message.startswith("PairwiseTrainer.compute_loss()")
    assert failure.package == "transformers" and failure.frames[0].code.startswith("loss = self.compute_loss(")


def test_traceback_pasted_indented_among_unindented_lines() -> None:
    failures = parse(
        """It crashes at the first step:

    Traceback (most recent call last):
      File "/home/me/rl/train.py", line 57, in strict_format_reward
        return [1.0 if re.match(pattern, c.strip()) else 0.0 for c in completions]
    AttributeError: 'list' object has no attribute 'strip'
      0%|          | 0/934 [00:14<?, ?it/s]"""
    )
    assert [(f.type, f.line, f.package) for f in failures] == [("AttributeError", 6, "user")]
    # A line at the source lines' depth is still source, not the exception line.
    (source_only,) = parse(
        """  Traceback (most recent call last):
    File "/home/me/rl/train.py", line 57, in f
      KeyError: this is source text
  ValueError: bad"""
    )
    assert source_only.type == "ValueError" and source_only.frames[0].code == "KeyError: this is source text"


def test_cpp_terminate_and_what() -> None:
    (failure,) = parse(
        """terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)"""
    )
    assert failure.kind == "cpp" and failure.type == "DistBackendError" and failure.qualname == "c10::DistBackendError"
    assert failure.message.startswith("[Rank 0] Watchdog caught") and failure.signal is None


@pytest.mark.parametrize(
    ("line", "signal", "code"),
    [
        ("Fatal Python error: Segmentation fault", "SIGSEGV", None),
        ("train.sh: line 7: 41311 Killed                  python train.py", "SIGKILL", None),
        ("Segmentation fault (core dumped)", "SIGSEGV", None),
        ("srun: error: node-3: task 0: Killed", "SIGKILL", None),
        ("  exitcode  : -9 (pid: 4242)", "SIGKILL", -9),
        ("E0101 10:00:00.000000 77 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 88) of binary: /usr/bin/python", "SIGABRT", -6),
        ("  traceback : Signal 9 (SIGKILL) received by PID 4242", "SIGKILL", None),
        ("Process exited with exit code 137", "SIGKILL", 137),
        ("*** SIGSEGV received at time=1700000000 on cpu 3 ***", "SIGSEGV", None),
    ],
)
def test_fatal_signals_and_exit_codes(line: str, signal: str, code: int | None) -> None:
    (failure,) = parse(line)
    assert failure.signal == signal
    assert failure.exit_code == code


def test_signal_reported_inside_an_exception_message() -> None:
    (killed,) = parse("RuntimeError: DataLoader worker (pid 22358) is killed by signal: Killed.")
    (bus,) = parse("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory.")
    assert killed.signal == "SIGKILL" and bus.signal == "SIGBUS"


def test_exit_without_signal_is_secondary() -> None:
    (failure,) = parse("srun: error: node-1: task 0: Exited with exit code 1")
    assert failure.kind == "exit" and failure.exit_code == 1 and failure.signal is None and failure.secondary


def test_ignored_exceptions_and_launcher_wrappers() -> None:
    failures = parse(
        """Exception ignored in: <function Engine.__del__ at 0x7f00>
Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/deepspeed/ops/adam/cpu_adam.py", line 102, in __del__
    self.ds_opt_adam.destroy_adam(self.opt_id)
AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: """
    )
    ignored, launcher = failures
    assert ignored.ignored and not launcher.ignored
    assert launcher.secondary and not ignored.secondary


def test_ipython_tracebacks() -> None:
    (failure,) = parse(
        """RuntimeError                              Traceback (most recent call last)
Cell In[7], line 20
     18 )
---> 20 trainer = SFTTrainer(
     21     model=model,

File ~/miniconda3/envs/u/lib/python3.12/site-packages/datasets/arrow_dataset.py:3173, in Dataset.map(self, function)
   3171 if len(kwargs_per_job) > 0:
-> 3173     for rank, done, content in iflatmap_unordered(pool, Dataset._map_single):

RuntimeError: One of the subprocesses has abruptly died during map operation."""
    )
    assert failure.type == "RuntimeError"
    assert [f.function for f in failure.frames] == ["<cell>", "Dataset.map"]
    assert failure.frames[0].code == "trainer = SFTTrainer("
    assert failure.package == "datasets"


def test_source_lines_pasted_without_frames_are_kept_as_context() -> None:
    (failure,) = parse(
        """    rewards_per_func[:, i] = torch.tensor(output_reward_func, dtype=torch.float32)
TypeError: must be real number, not NoneType"""
    )
    assert [text.strip() for _n, text in failure.context_lines] == ["rewards_per_func[:, i] = torch.tensor(output_reward_func, dtype=torch.float32)"]


def test_message_continuation_lines() -> None:
    (failure,) = parse(
        """ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0.
Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.
INFO 01-01 10:00:00 [core.py:1] next record"""
    )
    assert failure.detail == "Your Tesla V100-SXM2-32GB GPU has compute capability 7.0."


@pytest.mark.parametrize(
    "text",
    [
        "    raise ValueError(f'bad {x}')",
        "/opt/venv/lib/python3.10/site-packages/torch/utils.py:44: UserWarning: this is deprecated",
        "ERROR: Could not find a version that satisfies the requirement flash-attn",
        "2024-01-01 12:00:00 INFO retrying after ValueError: transient",
        "KeyError",
        "except ValueError:",
    ],
)
def test_lines_that_are_not_failures(text: str) -> None:
    assert parse(text) == []


def test_signal_of_code() -> None:
    assert signal_of_code(-9) == "SIGKILL" and signal_of_code(139) == "SIGSEGV" and signal_of_code(1) is None


def test_interleaved_rank_tracebacks_stay_apart() -> None:
    failures = parse(
        """[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank0]:   File "/work/train.py", line 10, in step
[rank1]:   File "/work/train.py", line 20, in other
[rank0]:     loss.backward()
[rank1]:     batch = next(it)
[rank1]: StopIteration
[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"""
    )
    by_process = {f.process: f for f in failures}
    assert [fr.function for fr in by_process["rank0"].frames] == ["step"]
    assert by_process["rank0"].frames[0].code == "loss.backward()"
    assert [fr.function for fr in by_process["rank1"].frames] == ["other"]
    assert by_process["rank1"].type == "StopIteration"
    assert by_process["rank0"].chain != by_process["rank1"].chain


@pytest.mark.parametrize(
    ("line", "type_"),
    [
        ("socket.gaierror: [Errno -2] Name or service not known", "gaierror"),
        ("filelock._error.Timeout: The file lock '/data/.lock' could not be acquired.", "Timeout"),
        ("_queue.Empty", "Empty"),
        ("concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly", "BrokenProcessPool"),
    ],
)
def test_any_exception_name_ends_a_traceback(line: str, type_: str) -> None:
    (failure,) = parse(f'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in run\n    do()\n{line}')
    assert failure.type == type_ and failure.frames[0].function == "run"


def test_dotted_exception_names_without_a_traceback() -> None:
    (failure,) = parse("pyarrow.lib.ArrowInvalid: Could not convert 'x' with type str: tried to convert to int64")
    assert failure.type == "ArrowInvalid" and failure.qualname == "pyarrow.lib.ArrowInvalid"
    assert parse("torch.distributed.run: WARNING setting OMP_NUM_THREADS") == []


@pytest.mark.parametrize(
    "text",
    [
        "step 40: Killed 0 stale requests",
        "Killed 3 idle workers after 60 s",
        "INFO worker pool: process exited (it was killed by SIGKILL earlier and restarted)",
    ],
)
def test_signal_words_in_ordinary_messages_are_not_failures(text: str) -> None:
    assert [f.signal for f in parse(text)] == []


def test_signals_named_in_exception_messages() -> None:
    (died,) = parse("RuntimeError: Worker 3 died with <Signals.SIGKILL: 9>.")
    (plain,) = parse("RuntimeError: the engine stopped; see its log for the reason (SIGKILL is one possibility)")
    (zsh,) = parse("zsh: killed     python train.py --config grpo.yaml")
    assert died.signal == "SIGKILL" and plain.signal is None and zsh.signal == "SIGKILL"


def test_message_continuation_stops_at_the_next_record() -> None:
    failures = parse(
        """[rank3]: RuntimeError: Triton Error [CUDA]: out of memory
[rank3]:[W903 10:11:12.000000000 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not called
/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py:88: UserWarning: CUDA initialization: unknown error
[rank2]: still running step 12"""
    )
    (failure,) = failures
    assert failure.detail == ""


def test_nccl_result_line_belongs_to_the_distributed_error() -> None:
    (failure,) = parse(
        """torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, internal error
ncclInternalError: Internal check failed.
Last error:
Proxy Call to rank 0 failed (Connect)"""
    )
    assert failure.type == "DistBackendError" and failure.detail.startswith("ncclInternalError: Internal check failed.")


def test_fatal_python_error_carries_the_crashing_threads_frames() -> None:
    (failure,) = parse(
        """Fatal Python error: Segmentation fault

Thread 0x00007f2a1bfff700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait

Current thread 0x00007f2a9c0b6740 (most recent call first):
  File "/opt/venv/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 90 in _flash_attn_forward
  File "/work/rl/train.py", line 77 in policy_step

Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)"""
    )
    assert failure.signal == "SIGSEGV"
    assert [f.function for f in failure.frames] == ["policy_step", "_flash_attn_forward"]
    assert failure.package == "flash_attn"


CUT_PASTE = """(RayWorkerWrapper pid=9, ip=10.0.0.2) ERROR 06-03 23:13:39 worker_base.py:148] Traceback (most recent call last):
(RayWorkerWrapper pid=9, ip=10.0.0.2) ERROR 06-03 23:13:39 worker_base.py:148]   File "/env/site-packages/vllm/worker/worker_base.py", line 140, in execute_method
(RayWorkerWrapper pid=9, ip=10.0.0.2) ERROR 06-03 23:13:39 worker_base.py:148]     return executor(*args, **kwargs)
(RayWorkerWrapper pid=9, ip=10.0.0.2) ERROR 06-03 23:13:39 worker_base.py:148]   File "/env/site-packages/vllm/worker/worker.py", line 286, in start_worker_execution_loop"""


def test_a_traceback_cut_at_the_end_of_the_input_is_a_failure_with_its_frames() -> None:
    lines = list(enumerate(CUT_PASTE.splitlines(), start=1))
    (failure,) = parse_failures(lines, end=len(lines))
    assert failure.type == CUT_TYPE and failure.kind == "exception"
    assert failure.process == "RayWorkerWrapper pid=9"
    assert [f.function for f in failure.frames] == ["execute_method", "start_worker_execution_loop"]
    assert failure.package == "vllm" and failure.line == 4


def test_a_traceback_open_where_a_window_ends_is_not_called_cut() -> None:
    lines = list(enumerate(CUT_PASTE.splitlines(), start=1))
    assert parse_failures(lines, end=len(lines) + 500) == []  # the file goes on past the window
    assert parse_failures(lines) == []  # no end known


def test_frames_followed_by_other_output_are_not_a_cut_traceback() -> None:
    text = CUT_PASTE + "\nINFO 06-03 23:13:40 llm_engine.py:1] step 2\n"
    lines = list(enumerate(text.splitlines(), start=1))
    assert parse_failures(lines, end=len(lines)) == []


def test_an_exception_line_with_a_full_width_colon_is_read_like_an_ascii_one() -> None:
    (failure,) = parse("RuntimeError：element 0 of tensors does not require grad and does not have a grad_fn")
    assert failure.type == "RuntimeError"
    assert failure.message == "element 0 of tensors does not require grad and does not have a grad_fn"


def test_a_chain_cut_after_its_exception_keeps_that_exception_as_the_failure() -> None:
    text = """Traceback (most recent call last):
  File "/env/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
RuntimeError: DataLoader worker (pid 9021) is killed by signal: Segmentation fault.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/workspace/train_grpo.py", line 152, in <module>
    main()"""
    lines = list(enumerate(text.splitlines(), start=1))
    assert [f.type for f in parse_failures(lines, end=len(lines))] == ["RuntimeError"]


OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/env/site-packages/trl/trainer/grpo_trainer.py", line 10, in train',
    "    foo()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]


@pytest.mark.parametrize(
    ("prefix", "process"),
    [
        ("2024-05-01T10:00:00.123456789Z ", None),  # kubectl logs --timestamps
        ("2024-05-01T10:00:00.123456789Z stderr F ", None),  # a node's container log (CRI)
        ("2024-05-01T10:00:00.123456789Z stderr F [rank5]: ", "rank5"),
        ("[2024-05-01 10:00:00] ", None),
        ("3: ", "task3"),  # srun --label
        ("[1,2]<stderr>:", "rank2"),  # Open MPI --tag-output
        ("10.0.0.7: ", "10.0.0.7"),  # pdsh / the DeepSpeed launcher
        ("gpu-node-07: ", "gpu-node-07"),
        ("trainer-1  | ", "trainer-1"),  # docker compose
        ("> ", None),  # quoted in a Markdown reply
    ],
)
def test_tracebacks_under_a_collectors_or_launchers_line_prefix_are_read(prefix: str, process: str | None) -> None:
    lines = [(number, prefix + text) for number, text in enumerate(OOM_TRACEBACK, start=1)]
    (failure,) = parse_failures(lines)
    assert (failure.type, failure.process, len(failure.frames)) == ("OutOfMemoryError", process, 1)
    assert failure.message.startswith("CUDA out of memory")


def test_an_exception_name_is_not_taken_for_a_host_prefix() -> None:
    (failure,) = parse("ValueError: bad value")
    assert failure.type == "ValueError" and failure.process is None


def test_colour_codes_that_lost_their_escape_byte_do_not_hide_a_ray_traceback() -> None:
    lines = [(n, f"[36m(TaskRunner pid=2155)[0m {text}") for n, text in enumerate(OOM_TRACEBACK, start=1)]
    (failure,) = parse_failures(lines)
    assert (failure.type, failure.process) == ("OutOfMemoryError", "TaskRunner pid=2155")


def test_a_bracketed_duration_in_a_message_is_not_a_colour_code() -> None:
    (failure,) = parse("TimeoutError: no answer after [10m] of waiting")
    assert failure.message == "no answer after [10m] of waiting"


@pytest.mark.parametrize(
    ("line", "kind", "process"),
    [
        ("nemo-run-0/0 openai.RateLimitError: Error code: 429 - {'error': {}}", "RateLimitError", "nemo-run-0/0"),  # NeMo-Run's task label
        ("worker3 ValueError: bad value", "ValueError", "worker3"),
        ("CRITICAL [olmo.util:158, rank=6] Uncaught HfHubHTTPError: 429 Client Error: Too Many Requests", "HfHubHTTPError", None),
        ("Unhandled exception: KeyError: 'prompt'", "KeyError", None),
        ("**RuntimeError: world_size (8) is not equal to tensor_model_parallel_size (4)**", "RuntimeError", None),  # set in bold
    ],
)
def test_an_exception_line_behind_a_label_or_a_loggers_words_is_read(line: str, kind: str, process: str | None) -> None:
    (failure,) = parse(line)
    assert (failure.type, failure.process) == (kind, process)


@pytest.mark.parametrize("line", ["step-10 loss went up", "worker3 reached step 10", "node-1/2 Error rate: 0.1", "Unhandled cases: 3"])
def test_a_label_is_taken_off_only_in_front_of_an_exception(line: str) -> None:
    assert parse(line) == []


def test_a_rank_blanked_out_in_a_paste_still_prefixes_its_traceback() -> None:
    lines = [(number, "[rankx]: " + text) for number, text in enumerate(OOM_TRACEBACK, start=1)]
    (failure,) = parse_failures(lines)
    assert (failure.type, len(failure.frames), failure.package) == ("OutOfMemoryError", 1, "trl")
