"""Preemption for PyTorch jobs: an agreed stop, checkpoints, requeue.

Slurm ends a job with a signal (``--signal=USR1@120`` before the time limit,
SIGTERM on preemption or ``scancel``); the ranks get it at different steps, or
only one of them does. With these, every rank stops after the same step,
writes one consistent checkpoint, and the requeued job continues from it::

    import slurmddp, slurmddp.torch

    stop = slurmddp.StopSignal()                      # SIGTERM, SIGUSR1, SIGUSR2, SIGHUP
    dist.init_process_group("nccl", init_method="slurmddp://")
    ckpt = slurmddp.Checkpointer("checkpoints")       # checkpoints/job-<id>
    if (c := ckpt.load_latest()) is not None:
        model.load_state_dict(c.state["model"]); sampler.load_state_dict(c.sampler); step = c.step
    ...
        if stop.should_stop(step):
            ckpt.save(step, {"model": model.state_dict()}, sampler=sampler)
            slurmddp.requeue_and_exit()               # rank 0 requeues; every rank exits 75

The C++ runtime does the signal handling (Note [Stop requests]) and the file
format with its atomic writes and checksums (Note [Checkpoint layout]); the
collectives are torch.distributed's, on a Gloo group (the default group when it
is Gloo, else one made for this at the first use).
"""
from __future__ import annotations

import atexit
import collections
import functools
import io
import os
import re
import signal
import sys
import time
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _core

__all__ = [
    "EXIT_REQUEUE",
    "Checkpointer",
    "Resumed",
    "StopSignal",
    "requeue",
    "requeue_and_exit",
    "restart_count",
    "run_id",
]

# The exit status of a rank that stopped after a checkpoint and wants to be run
# again (EX_TEMPFAIL, "try again"): the batch script requeues on it, or
# slurm.conf's RequeueExit=75 makes Slurm do so itself.
EXIT_REQUEUE = 75

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)


def restart_count() -> int:
    """How many times Slurm requeued this job: 0 on the first run.

    ``SLURMDDP_RESTART_COUNT`` (the plugin's), else ``SLURM_RESTART_COUNT``, else 0.
    """
    for var in ("SLURMDDP_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        value = os.environ.get(var)
        if value is None or value == "":
            continue
        try:
            count = int(value)
        except ValueError:
            count = -1
        if count < 0:
            raise _core.InvalidArgument(
                f"restart_count: {var}={value!r} is not a count of restarts (expected an "
                f"integer >= 0)")
        return count
    return 0


def run_id() -> str:
    """A name for this run that stays the same across requeues of one job: the
    job id, ``<array job>_<task>`` in a job array, ``local`` outside Slurm.
    For loggers, e.g. ``wandb.init(id=slurmddp.run_id(), resume="allow")``."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or "local"


def requeue(scontrol: str = "scontrol") -> None:
    """Asks Slurm to requeue this job (``scontrol requeue``; the array task in a
    job array). The job must be requeueable (``#SBATCH --requeue``). Raises
    ``slurmddp.Error`` with scontrol's message when it fails, and when scontrol
    is missing (a container image): then exit with ``EXIT_REQUEUE`` and let the
    batch script or ``RequeueExit=75`` requeue."""
    _core.requeue(scontrol)


def requeue_and_exit(group: Optional[Any] = None) -> None:
    """After a checkpoint: rank 0 asks Slurm to requeue the job, every rank
    leaves the process group and exits with ``EXIT_REQUEUE``.

    When the requeue fails (scontrol missing, the job not requeueable), rank 0
    says why on stderr and the ranks still exit with ``EXIT_REQUEUE``, so a
    batch script or ``RequeueExit=75`` can requeue instead.
    """
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        try:
            requeue()
        except _core.Error as e:
            print(f"slurmddp: {e}; exiting with {EXIT_REQUEUE} for the batch script to "
                  f"requeue", file=sys.stderr, flush=True)
    if distributed:
        dist.barrier(group=_cpu_group(group))
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.exit(EXIT_REQUEUE)


# The Gloo group for CPU tensors when the default group is not Gloo (NCCL):
# made once per process, at the first use (collective: every rank gets there
# in the same order, as with any torch.distributed call).
_gloo_group: Optional[Any] = None


def _cpu_group(group: Optional[Any]) -> Optional[Any]:
    global _gloo_group
    if group is not None:
        return group
    if not dist.is_initialized():
        raise _core.InvalidArgument(
            "slurmddp: torch.distributed is not initialized; call "
            "dist.init_process_group(...) before the first should_stop(), save() or "
            "load_latest()")
    if "gloo" in str(dist.get_backend()):
        return None  # the default group
    if _gloo_group is None:
        _gloo_group = dist.new_group(backend="gloo")
    return _gloo_group


# Note [Tensors outlive torch's Gloo thread]
#   A torch Gloo collective hands its tensors to a worker thread, which drops
#   its reference a moment after wait() returns. If the caller's Python tensor
#   is gone by then, that drop frees the tensor's Python object and needs the
#   GIL; during interpreter teardown (a rank leaving on an error right after
#   load_latest(), without destroy_process_group) Python 3.13 ends such a
#   thread with pthread_exit, which unwinds through torch's noexcept worker
#   loop: std::terminate, the rank killed by SIGABRT instead of exiting with
#   its status (torch 2.6: 12 in 140 such exits, measured). So every tensor this
#   module gives a collective is kept here until the next few collectives have
#   run, and the module's collectives use tensors it made itself (not
#   broadcast_object_list / all_gather_object, whose tensors are torch's).
#   At exit that is not enough (_let_gloo_finish): a rank that leaves on an
#   error right after a collective (a refused checkpoint) starts teardown before
#   the Gloo thread has dropped that collective's work, and newer torch (2.15)
#   takes the GIL whenever C++ drops a reference to a tensor that Python also
#   holds, kept or not (5 in 90 such exits aborted, measured). So at exit, while
#   other threads may still take the GIL, each kept tensor is waited for until
#   only Python holds it (Tensor._use_count(), where torch has it; at most
#   _EXIT_WAIT_S in all), and is then kept for good.
_recent: "collections.deque[Any]" = collections.deque(maxlen=8)
_EXIT_WAIT_S = 2.0


def _keep(*tensors: Any) -> None:
    _recent.append(tensors)


# Registered before _close_all_stops, so that it runs after it (atexit runs
# the last registered first) and also waits for the check that one finishes.
@atexit.register
def _let_gloo_finish() -> None:
    deadline = time.monotonic() + _EXIT_WAIT_S
    for kept in _recent:
        for item in kept:
            for t in item if isinstance(item, list) else (item,):
                use_count = getattr(t, "_use_count", None)
                while use_count is not None and use_count() > 1 and \
                        time.monotonic() < deadline:
                    time.sleep(0.001)  # the Gloo thread needs the GIL to let go
        _core.keep_forever(kept)


def _broadcast_steps(steps: List[int], src_rank: int, group: Optional[Any]) -> List[int]:
    """Rank 0's list of step numbers on every rank (collective)."""
    count = torch.tensor([len(steps)], dtype=torch.int64)
    dist.broadcast(count, src=src_rank, group=group)
    _keep(count)
    n = int(count.item())
    if n == 0:
        return []
    values = torch.tensor(steps if len(steps) == n else [0] * n, dtype=torch.int64)
    dist.broadcast(values, src=src_rank, group=group)
    _keep(values)
    return [int(v) for v in values.tolist()]


def _gather_texts(text: str, world: int, group: Optional[Any]) -> List[str]:
    """Every rank's `text`, in rank order (collective)."""
    data = text.encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    width = max(1, max(lengths))
    mine = torch.zeros(width, dtype=torch.uint8)
    if data:
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    gathered = [torch.empty(width, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    _keep(size, sizes, mine, gathered)
    return [bytes(t[:n].tolist()).decode("utf-8", errors="replace")
            for t, n in zip(gathered, lengths)]


_live_stops: "weakref.WeakSet[StopSignal]" = weakref.WeakSet()


@atexit.register
def _close_all_stops() -> None:
    for s in list(_live_stops):
        try:
            s._close(ignore=True)  # see StopSignal.__del__
        except Exception:  # noqa: BLE001 (the process is exiting; the stop is moot)
            pass


def _finish_checks() -> None:
    for s in list(_live_stops):
        try:
            s._finish_check()
        except Exception:  # noqa: BLE001 (a lost peer: the group is being destroyed anyway)
            pass


# Note [Checks in flight]
#   should_stop() leaves one all-reduce in flight between checks. A torch Work
#   still pending when its process group is destroyed is not safe to leave, and
#   one freed by torch's Gloo thread during
#   interpreter teardown waits for the GIL the teardown holds. So the check in
#   flight is finished (its answer kept for the next should_stop) before
#   torch.distributed.destroy_process_group runs, which is wrapped here for
#   that, at exit, and when a StopSignal is dropped (a Work dropped unwaited
#   ends the process in std::terminate at exit on torch 2.6, measured 4 in 24
#   runs of a program whose StopSignal went out of scope with a check in flight).
def _wrap_destroy() -> None:
    from torch.distributed import distributed_c10d
    original = distributed_c10d.destroy_process_group
    if getattr(original, "_slurmddp_wrapped", False):
        return

    @functools.wraps(original)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        _finish_checks()
        return original(*args, **kwargs)

    destroy_process_group._slurmddp_wrapped = True  # type: ignore[attr-defined]
    distributed_c10d.destroy_process_group = destroy_process_group
    if getattr(dist, "destroy_process_group", None) is original:
        dist.destroy_process_group = destroy_process_group


if dist.is_available():
    _wrap_destroy()


class StopSignal:
    """A stop request every rank agrees on (Note [Stop requests]).

    Installs handlers for ``signals`` now (make it early: a signal while the
    program starts is kept instead of killing it); each handler only records the
    signal and calls the handler installed before it, if any.

    ``should_stop(step)`` is collective: call it on every rank with the same
    step numbers. At steps that are multiples of ``check_every`` every rank
    contributes the signal it saw to one all-reduce (max) of one integer on a
    Gloo group, started without waiting and read at the next check, so it
    overlaps a step of training; the answer is the same on every rank at the
    same step, one check after the signal was seen. Once it was true it stays
    true, without communicating.

    A dead or stuck rank makes the check fail like any collective, within the
    group's timeout (``group``: a Gloo group over every rank; default as for
    the Checkpointer). After a stop was agreed, ``close()`` (and exit) ignores the
    signals instead of restoring the old handlers: a second signal on the way
    out must not kill the process (Slurm sends SIGTERM to the others when one
    task exits).
    """

    def __init__(self, signals: Sequence[Union[int, signal.Signals]] = DEFAULT_SIGNALS, *,
                 check_every: int = 1, group: Optional[Any] = None) -> None:
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise _core.InvalidArgument(
                f"StopSignal: check_every={check_every!r}; expected an integer >= 1")
        self.check_every = check_every
        self._handlers: Optional[_core.StopHandlers] = _core.StopHandlers(
            [int(s) for s in signals])
        self._group_arg = group
        self._pending: Optional[Tuple[Any, torch.Tensor]] = None
        self._answer = 0  # of the last check finished early (Note [Checks in flight])
        self.stopped_at: Optional[int] = None
        _live_stops.add(self)

    def _live(self) -> _core.StopHandlers:
        if self._handlers is None:
            raise _core.InvalidArgument("StopSignal: used after close()")
        return self._handlers

    @property
    def local_signal(self) -> int:
        """The signal this process received (0: none); no communication."""
        return self._live().local_signal

    @property
    def agreed_signal(self) -> int:
        """After should_stop() returned True: the signal that decided it (the
        largest number any rank saw)."""
        return self._live().agreed_signal

    @property
    def signal_name(self) -> str:
        """``"SIGUSR1"``: the agreed signal's name (``""`` before a stop)."""
        s = self.agreed_signal
        return _core.signal_name(s) if s else ""

    def request(self, sig: Union[int, signal.Signals] = signal.SIGTERM) -> None:
        """Records a stop request on this rank as if ``sig`` had arrived."""
        self._live().request(int(sig))

    def should_stop(self, step: int) -> bool:
        """True on every rank once any rank received a stop signal (see the class)."""
        handlers = self._live()
        if handlers.agreed_signal:
            return True
        if step % self.check_every != 0:
            return False
        self._finish_check()
        decided, self._answer = self._answer, 0
        if decided:
            handlers.agree(decided)
            self.stopped_at = step
            return True
        flag = torch.tensor([handlers.local_signal], dtype=torch.int64)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_cpu_group(self._group_arg),
                               async_op=True)
        self._pending = (work, flag)
        return False

    def _finish_check(self) -> None:
        """Waits for the check in flight, if any, and keeps its answer."""
        pending, self._pending = self._pending, None
        if pending is not None:
            work, flag = pending
            work.wait()
            _keep(flag)  # Note [Tensors outlive torch's Gloo thread]
            self._answer = int(flag.item())

    def close(self) -> None:
        """Waits for a check in flight, then restores the previous handlers (or
        ignores the signals once a stop was agreed)."""
        self._close(ignore=False)

    def _close(self, ignore: bool) -> None:
        if self._handlers is None:
            return
        try:
            self._finish_check()
        finally:
            handlers, self._handlers = self._handlers, None
            if ignore and not handlers.agreed_signal:
                # the destructor then ignores the signals instead of restoring them
                handlers.agree(handlers.local_signal or int(signal.SIGTERM))
            handlers.close()

    def __del__(self) -> None:
        # Dropped, or the process is exiting (Note [Checks in flight]): the check
        # in flight is finished, and a stop signal from now on is ignored: the
        # training is over, and the default action would kill the process and
        # fail a job whose work is done (a time-limit warning arriving as the
        # last run of a requeued job ended did that).
        try:
            self._close(ignore=True)
        except Exception:  # noqa: BLE001 (nothing to tell from a finalizer)
            pass

    def __enter__(self) -> "StopSignal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Resumed(NamedTuple):
    """What ``Checkpointer.load_latest()`` returns."""
    step: int
    state: Any  # what save() was given (rank 0's, or this rank's with scope="every_rank")
    sampler: Optional[Dict[str, Any]]  # for DistributedSampler.load_state_dict, if saved
    path: str  # the checkpoint's directory


_SAMPLER_LINE = re.compile(r"slurmddp-sampler v1 epoch=(\d+) position=(\d+) ")
_SCOPES = ("rank0", "every_rank")


def _sampler_text(sampler: Any) -> str:
    if sampler is None:
        return ""
    state = sampler.state_dict() if hasattr(sampler, "state_dict") else sampler
    text = state.get("state") if isinstance(state, dict) else None
    if not isinstance(text, str):
        raise _core.InvalidArgument(
            f"Checkpointer.save: sampler={type(sampler).__name__} has no slurm-ddp sampler "
            f"state; pass slurmddp.torch.DistributedSampler or its state_dict(position=...) "
            f"(torch's own DistributedSampler cannot resume mid-epoch)")
    return text


def _sampler_state(text: str) -> Optional[Dict[str, Any]]:
    if not text:
        return None
    m = _SAMPLER_LINE.match(text)
    state: Dict[str, Any] = {"state": text}
    if m:
        state["epoch"], state["position"] = int(m.group(1)), int(m.group(2))
    return state


def _complete_marker(text: str) -> Dict[str, str]:
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


class Checkpointer:
    """Checkpoints for preemption and requeue (Note [Checkpoint layout]).

    ``directory``/job-<id> (``job-<array job>_<task>`` in a job array; the same
    across requeues of one job, and another for every other job; ``per_job=False``:
    ``directory`` itself, e.g. for a chain of jobs). It must be on a file system
    every node sees.

    ``save(step, state, sampler=)`` is collective: ``state`` is anything
    ``torch.save`` takes (model, optimizer, scaler, LR scheduler state dicts,
    counters); with ``scope="rank0"`` (default) rank 0 writes it and every rank
    its sampler position, with ``scope="every_rank"`` each rank writes its own
    (a shard). Every file is written to a temporary name, fsynced and renamed,
    and carries a checksum; a checkpoint counts once every rank's file is
    durable (rank 0 then writes its COMPLETE marker). The ``keep`` newest are kept.

    ``load_latest()`` is collective: the newest checkpoint that every rank can
    read, or None when there is none. A damaged one (checksum, truncation), a
    foreign one (another job, another world size) or one a rank cannot see is
    refused with a message naming the file, rank and reason, and the previous one
    is tried; when none is usable it raises ``slurmddp.Error``: never a silent
    fresh start.

    ``run_id`` and ``restart_count`` name the run for loggers. ``group``: a
    Gloo group over every rank (default: the default group when it is Gloo,
    else one made at the first use).
    """

    def __init__(self, directory: str = "checkpoints", *, keep: int = 2, scope: str = "rank0",
                 per_job: bool = True, group: Optional[Any] = None) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise _core.InvalidArgument(f"Checkpointer: keep={keep!r}; expected an integer >= 1")
        if scope not in _SCOPES:
            raise _core.InvalidArgument(
                f"Checkpointer: scope={scope!r}; expected one of {', '.join(_SCOPES)}")
        if not directory:
            raise _core.InvalidArgument("Checkpointer: the directory is empty")
        self.dir = _core.job_checkpoint_dir(directory) if per_job else directory
        self.keep = keep
        self.scope = scope
        self.per_job = per_job
        self.run_id = run_id()
        self.restart_count = restart_count()
        self._group_arg = group
        try:
            os.makedirs(self.dir, exist_ok=True)
        except OSError as e:
            raise _core.Error(f"Checkpointer: failed to create the directory {self.dir}: "
                              f"{e.strerror}") from None

    def _world(self) -> Tuple[int, int, Optional[Any]]:
        group = _cpu_group(self._group_arg)
        return dist.get_rank(group), dist.get_world_size(group), group

    def save(self, step: int, state: Any, *, sampler: Any = None) -> str:
        """Writes checkpoint ``step`` (collective; see the class). Returns its directory."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise _core.InvalidArgument(f"Checkpointer.save: step={step!r}; expected an "
                                        f"integer >= 0")
        rank, world, group = self._world()
        sdir = os.path.join(self.dir, f"step-{step}")
        os.makedirs(sdir, exist_ok=True)
        payload: Union[bytes, memoryview] = b""
        if self.scope == "every_rank" or rank == 0:
            buf = io.BytesIO()
            torch.save(state, buf)
            payload = buf.getbuffer()
        data = _core.encode_checkpoint(step, rank, world, _sampler_text(sampler), payload)
        del payload
        _core.write_atomic(sdir, f"rank-{rank}.ckpt", data)
        del data
        dist.barrier(group=group)  # every rank's file is durable
        if rank == 0:
            _core.write_atomic(sdir, "COMPLETE",
                               f"complete step={step} world={world} scope={self.scope} "
                               f"run={self.run_id}\n")
            _core.write_atomic(self.dir, "LATEST", f"step-{step}\n")
            _core.prune_checkpoints(self.dir, step, self.keep)
        dist.barrier(group=group)  # nobody goes on before the checkpoint is complete
        return sdir

    def complete_steps(self) -> List[int]:
        """The steps of the complete checkpoints in the directory, newest first
        (local: no communication)."""
        steps = []
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        for name in names:
            m = re.fullmatch(r"step-(\d+)", name)
            if m and os.path.exists(os.path.join(self.dir, name, "COMPLETE")):
                steps.append(int(m.group(1)))
        return sorted(steps, reverse=True)

    def _read(self, step: int, rank: int, world: int) -> Tuple[str, bytes]:
        """(sampler, payload) of this rank at `step`; raises _core.Error saying
        why the checkpoint cannot be used."""
        sdir = os.path.join(self.dir, f"step-{step}")
        marker_path = os.path.join(sdir, "COMPLETE")
        try:
            with open(marker_path, encoding="utf-8", errors="replace") as f:
                marker = _complete_marker(f.read())
        except OSError as e:
            raise _core.Error(f"checkpoint {marker_path} is unreadable ({e.strerror}); the "
                              f"directory must be shared by every node") from None
        if marker.get("world") not in (None, str(world)):
            raise _core.Error(f"checkpoint {sdir} was written by {marker['world']} ranks; this "
                              f"job has {world} (resuming needs the same number of ranks)")
        if self.per_job and marker.get("run") not in (None, self.run_id):
            raise _core.Error(f"checkpoint {sdir} belongs to run {marker['run']}, not to this "
                              f"run ({self.run_id}); per-job directories are not shared "
                              f"(per_job=False to continue another job's checkpoints)")
        if marker.get("scope") not in (None, self.scope):
            raise _core.InvalidArgument(
                f"Checkpointer: {sdir} was saved with scope={marker['scope']!r}, this "
                f"Checkpointer has scope={self.scope!r}")

        def rank_file(who: int) -> Tuple[str, bytes]:
            path = os.path.join(sdir, f"rank-{who}.ckpt")
            got_step, got_rank, got_world, sampler, payload = _core.read_checkpoint(path)
            if (got_step, got_rank, got_world) != (step, who, world):
                raise _core.Error(
                    f"checkpoint {path} holds step {got_step} of rank {got_rank} in a world of "
                    f"{got_world}; expected step {step} of rank {who} in a world of {world}")
            return sampler, payload

        sampler, payload = rank_file(rank)
        if self.scope == "rank0" and rank != 0:
            payload = rank_file(0)[1]
        return sampler, payload

    def load_latest(self, *, map_location: Any = None, **torch_load_args: Any) -> Optional[Resumed]:
        """The newest usable checkpoint on every rank, or None (collective; see
        the class). ``map_location`` and other keywords go to ``torch.load``."""
        rank, world, group = self._world()
        # the group spans every rank, so its rank 0 is the global one
        steps = _broadcast_steps(self.complete_steps() if rank == 0 else [], 0, group)
        refused: List[str] = []
        for step in steps:
            reason = ""
            try:
                sampler, payload = self._read(step, rank, world)
            except _core.InvalidArgument:
                raise
            except _core.Error as e:
                reason = str(e)
            first = torch.tensor([rank if reason else world], dtype=torch.int64)
            dist.all_reduce(first, op=dist.ReduceOp.MIN, group=group)
            _keep(first)
            if int(first.item()) == world:
                state = torch.load(io.BytesIO(payload), map_location=map_location,
                                   **torch_load_args)
                if refused and rank == 0:
                    print(f"slurmddp: resuming from {self.dir}/step-{step}, the newest usable "
                          f"checkpoint", file=sys.stderr, flush=True)
                return Resumed(step, state, _sampler_state(sampler),
                               os.path.join(self.dir, f"step-{step}"))
            reasons = _gather_texts(reason, world, group)
            failed = [(r, text) for r, text in enumerate(reasons) if text]
            why = "; ".join(f"rank {r}: {text}" for r, text in failed[:3])
            if len(failed) > 3:
                why += f"; and {len(failed) - 3} more ranks"
            refused.append(f"step-{step} ({why})")
            if rank == 0:
                print(f"slurmddp: refusing checkpoint {self.dir}/step-{step}: {why}; trying the "
                      f"previous one", file=sys.stderr, flush=True)
        if refused:
            raise _core.Error(
                f"Checkpointer: no usable checkpoint in {self.dir}: {'; '.join(refused)}; not "
                f"starting from scratch (remove the directory to start a fresh run)")
        return None
