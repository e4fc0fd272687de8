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
import io
import os
import pickletools
import re
import signal
import socket
import sys
import time
import weakref
import zipfile
from datetime import timedelta
from typing import IO, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _core
from . import torch as _sdtorch

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


def _requeue_or_say_why() -> None:
    """requeue(); when it fails, says why on stderr (the rank exits EXIT_REQUEUE anyway)."""
    try:
        requeue()
    except _core.Error as e:
        print(f"slurmddp: {e}; exiting with {EXIT_REQUEUE} for the batch script to "
              f"requeue", file=sys.stderr, flush=True)


def requeue_and_exit(group: Optional[Any] = None) -> None:
    """After a checkpoint: rank 0 asks Slurm to requeue the job, every rank
    leaves the process group and exits with ``EXIT_REQUEUE``.

    When the requeue fails (scontrol missing, the job not requeueable), rank 0
    says why on stderr and the ranks still exit with ``EXIT_REQUEUE``, so a
    batch script or ``RequeueExit=75`` can requeue instead.
    """
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        _requeue_or_say_why()
    if distributed:
        dist.barrier(group=_cpu_group(group))
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.exit(EXIT_REQUEUE)


# Note [The side group]
#   The stop checks and the checkpoints' agreements run on a Gloo group of
#   their own over every rank, made with the default group's timeout, never on
#   the default group: under NCCL that one cannot take CPU tensors, and under
#   Gloo a check that one rank makes and another does not would pair with the
#   training's own all-reduces (a wrong answer or a hang with no message). On
#   its own group a check pairs only with checks, and should_stop() compares
#   the ranks' steps (Note [Checks at different steps]). Making a group is
#   collective, so it is made where every rank is: in Checkpointer() when
#   torch.distributed is initialized by then, else at the first should_stop(),
#   save() or load_latest(); never inside a rank-0-only call. It ends with the
#   default group (destroy_process_group).
_side_group: Optional[Any] = None


def _default_timeout() -> Optional[timedelta]:
    """The default group's timeout (init_process_group(timeout=)), or None."""
    from torch.distributed import distributed_c10d
    pg = distributed_c10d._get_default_group()
    getters = [lambda: pg.options._timeout]  # torch 1.13
    for device in ("cpu", "cuda"):  # torch >= 2.0: per backend
        getters.append(lambda d=device: pg._get_backend(torch.device(d)).options._timeout)
    for get in getters:
        try:
            timeout = get()
        except Exception:  # noqa: BLE001 (not this torch's layout)
            continue
        if isinstance(timeout, timedelta):
            return timeout
    return None


def _cpu_group(group: Optional[Any]) -> Optional[Any]:
    global _side_group
    if group is not None:
        return group
    if not dist.is_initialized():
        raise _core.InvalidArgument(
            "slurmddp: torch.distributed is not initialized; call "
            "dist.init_process_group(...) before the first should_stop(), save() or "
            "load_latest()")
    if _side_group is None:
        timeout = _default_timeout()
        _side_group = dist.new_group(backend="gloo", **({"timeout": timeout} if timeout else {}))
    return _side_group


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
#   torch.distributed.destroy_process_group runs (slurmddp.torch wraps it and
#   calls _before_destroy), at exit, and when a StopSignal is dropped (a Work dropped unwaited
#   ends the process in std::terminate at exit on torch 2.6, measured 4 in 24
#   runs of a program whose StopSignal went out of scope with a check in flight).
def _before_destroy(*args: Any, **kwargs: Any) -> None:
    global _side_group
    _finish_checks()
    group = args[0] if args else kwargs.get("group")
    if group is None or group is _side_group:
        _side_group = None  # Note [The side group]: it ends with the default group


# slurmddp.torch wraps destroy_process_group (Note [Gloo's threads at destroy_process_group])
_sdtorch._before_destroy.append(_before_destroy)


# Note [Checks at different steps]
#   should_stop() is collective, and a rank that calls it once more or once
#   less than the others (a loader of another length, a break on one rank)
#   shifts every later check against the others' by one: the answer arrives a
#   step late on some ranks, or they stop at different steps and checkpoint
#   inconsistent states, with no message. Each check therefore all-reduces the
#   step with the signal (its maximum and its negated minimum, in the same
#   three integers), and a check whose steps differ fails on every rank with
#   slurmddp.Error naming the steps, ranks and hosts, one check later (the
#   answer is read at the next check). A rank that stops calling altogether
#   leaves the others waiting in their next check, which fails within the
#   group's timeout like any collective.
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

    Ranks that check at different steps fail at the next check with
    ``slurmddp.Error`` naming them (Note [Checks at different steps]). A dead
    or stuck rank makes the check fail like any collective, within the
    group's timeout (``group``: a Gloo group over every rank; default: the
    package's own, with the default group's timeout, Note [The side group]).
    A handler that a library installs later for one of the signals (Python's
    ``signal.signal``) is found at the next check: ours goes back in front and
    calls it, and the rank's stderr says so once. After a stop was agreed, ``close()`` (and exit) ignores the
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
        self._told_replaced: set = set()
        self.stopped_at: Optional[int] = None
        _live_stops.add(self)

    def _live(self) -> _core.StopHandlers:
        if self._handlers is None:
            raise _core.InvalidArgument("StopSignal: used after close()")
        return self._handlers

    @property
    def local_signal(self) -> Optional[int]:
        """The signal this process received (None: none yet); no communication."""
        return self._live().local_signal

    @property
    def agreed_signal(self) -> Optional[int]:
        """After should_stop() returned True: the signal that decided it (the
        largest number any rank saw); None while no stop was agreed."""
        return self._live().agreed_signal

    @property
    def signal_name(self) -> str:
        """``"SIGUSR1"``: the agreed signal's name (``""`` before a stop)."""
        s = self.agreed_signal
        return _core.signal_name(s) if s is not None else ""

    def request(self, sig: Union[int, signal.Signals] = signal.SIGTERM) -> None:
        """Records a stop request on this rank as if ``sig`` had arrived."""
        self._live().request(int(sig))

    def should_stop(self, step: int) -> bool:
        """True on every rank once any rank received a stop signal (see the class)."""
        handlers = self._live()
        if handlers.agreed_signal is not None:
            return True
        if step % self.check_every != 0:
            return False
        self._finish_check()
        decided, self._answer = self._answer, 0
        if decided:
            handlers.agree(decided)
            self.stopped_at = step
            return True
        self._reinstall(handlers)
        # the signal, and the step as its largest and (negated) smallest
        flag = torch.tensor([handlers.local_signal or 0, step, -step], dtype=torch.int64)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_cpu_group(self._group_arg),
                               async_op=True)
        self._pending = (work, flag, step)
        return False

    def _reinstall(self, handlers: _core.StopHandlers) -> None:
        """Note [Handlers installed after ours] (runtime/resume/stop_signal.cpp)."""
        for sig in handlers.reinstall():
            name = _core.signal_name(sig)
            if name not in self._told_replaced:
                self._told_replaced.add(name)
                print(f"slurmddp: a handler for {name} was installed after StopSignal() (by "
                      f"signal.signal or a library, e.g. a trainer's auto-requeue); "
                      f"StopSignal's is back in front and calls it after recording the "
                      f"signal. A signal that arrived in between reached only that handler",
                      file=sys.stderr, flush=True)

    def _finish_check(self) -> None:
        """Waits for the check in flight, if any, and keeps its answer."""
        pending, self._pending = self._pending, None
        if pending is not None:
            work, flag, step = pending
            work.wait()
            _keep(flag)  # Note [Tensors outlive torch's Gloo thread]
            signal_max, step_max, minus_step_min = (int(v) for v in flag.tolist())
            if step_max != -minus_step_min:
                self._checked_at_different_steps(step)
            self._answer = signal_max

    def _checked_at_different_steps(self, step: int) -> None:
        """Note [Checks at different steps]: names the ranks and their steps
        (collective: every rank saw the same mismatch in the same check)."""
        group = _cpu_group(self._group_arg)
        world = dist.get_world_size(group)
        texts = _gather_texts(f"{step} {socket.gethostname()}", world, group)
        by_step: Dict[str, List[str]] = {}
        for r, text in enumerate(texts):
            at, _, host = text.partition(" ")
            by_step.setdefault(at, []).append(f"{r} ({host})")
        parts = []
        for at, who in sorted(by_step.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
            shown = ", ".join(who[:8]) + (f" and {len(who) - 8} more" if len(who) > 8 else "")
            parts.append(f"step {at} on rank{'s' if len(who) > 1 else ''} {shown}")
        raise _core.Error(
            f"StopSignal.should_stop: the ranks checked at different steps: {'; '.join(parts)}. "
            f"Every rank must call should_stop() with the same step numbers (a loader of "
            f"another length on some rank, or a break or continue before the check on one "
            f"rank, makes them differ)")

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
            if ignore and handlers.agreed_signal is None:
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


def _complete_steps_in(directory: str) -> List[int]:
    steps = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        m = re.fullmatch(r"step-(\d+)", name)
        if m and os.path.exists(os.path.join(directory, name, "COMPLETE")):
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


# Note [Saving a step again]
#   Saving into a step directory that holds a complete checkpoint (a step
#   saved twice, a run restarted from an earlier step) replaces the rank files
#   one by one; with the old COMPLETE still there, a rank killed midway would
#   leave old and new files side by side, each with a good checksum, and the
#   mix would load. So rank 0 removes that COMPLETE (durably) before any rank
#   renames a file into place, every rank knows it is gone before renaming (the
#   agreement after serializing into its temporary file), and the step is
#   complete again only when every new file is.
#   And a fresh start is never silent: when this run has no checkpoint but its
#   per-job directory's siblings hold other jobs' (a job submitted again by
#   hand is a new job, hence a new run), rank 0 says so on stderr, naming them
#   and how to continue one, and starts from scratch: other runs beside this
#   one are also what a sweep looks like, so it is not an error.
def _unmark_complete(sdir: str) -> None:
    marker = os.path.join(sdir, "COMPLETE")
    try:
        os.unlink(marker)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _core.Error(f"Checkpointer.save: cannot remove {marker} before saving the step "
                          f"again: {e.strerror}") from None
    fd = os.open(sdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _agree_or_raise(error: Optional[Exception], rank: int, world: int, group: Optional[Any],
                    what: str) -> None:
    """Collective: raises on every rank when any rank has an error: this
    rank's own error on the ranks that have one, on the others slurmddp.Error
    naming the ranks and their errors."""
    reason = str(error) if error is not None else ""
    if error is not None and not reason:
        reason = type(error).__name__
    why = _refusals(reason, rank, world, group)
    if not why:
        return
    if error is not None:
        raise error
    raise _core.Error(f"{what} failed on another rank: {why}")


class _RunClaim:
    """Note [Run identity] (runtime/resume/run_record.h): rank 0 claims a
    per-job directory for this run, once, before the first save or load reads
    or changes it; a directory of another job with the same id stops every
    rank, saying whose it is."""

    def __init__(self, directory: str, per_job: bool) -> None:
        self.dir = directory
        self.nonce = ""  # rank 0's, once claimed
        self._done = not per_job

    def ensure(self, rank: int, world: int, group: Optional[Any], what: str) -> None:
        """Collective on the first call with a per-job directory."""
        if self._done:
            return
        error: Optional[Exception] = None
        if rank == 0:
            try:
                self.nonce = _core.claim_run(self.dir)
            except _core.Error as e:
                error = e
        _agree_or_raise(error, rank, world, group, what)
        self._done = True

    def marker(self) -> str:
        """The COMPLETE marker's field naming the run ("" without a claim)."""
        return f" nonce={self.nonce}" if self.nonce else ""

    def check(self, marker: Dict[str, str], sdir: str) -> None:
        """Raises _core.Error (on rank 0, which holds the nonce) when the
        checkpoint was completed by another run."""
        theirs = marker.get("nonce")
        if self.nonce and theirs not in (None, self.nonce):
            raise _core.Error(f"checkpoint {sdir} was completed by another run (nonce {theirs}) "
                              f"than the one {self.dir}/RUN records (nonce {self.nonce}): it is "
                              f"not this job's")


def _refusals(reason: str, rank: int, world: int, group: Optional[Any]) -> str:
    """Collective: "" when no rank has a reason, else the first ranks' reasons
    ("rank 1: ...; rank 3: ...; and 2 more ranks")."""
    first = torch.tensor([rank if reason else world], dtype=torch.int64)
    dist.all_reduce(first, op=dist.ReduceOp.MIN, group=group)
    _keep(first)
    if int(first.item()) == world:
        return ""
    reasons = _gather_texts(reason, world, group)
    failed = [(r, text) for r, text in enumerate(reasons) if text]
    why = "; ".join(f"rank {r}: {text}" for r, text in failed[:3])
    if len(failed) > 3:
        why += f"; and {len(failed) - 3} more ranks"
    return why


# Note [Loading what was saved]
#   A requeued job loads what its previous run saved, and a state that saved
#   fine must not fail only then, on every rank. The policy, the same on every
#   supported torch (1.13 to the newest): Checkpointer(weights_only=True), the
#   default, loads with torch.load(weights_only=True) (tensors, containers,
#   numbers, strings and what torch.serialization.add_safe_globals allows:
#   nobody who can write the directory can run code in the job), and save()
#   refuses, before writing anything, a state whose pickle names anything else
#   (numpy arrays, a custom class), naming it: torch's own list of what is
#   unsafe where it has one (2.6 and later), else the globals of the pickle
#   checked against the weights-only unpickler's allowed ones (1.13). Torch
#   1.13's own weights-only unpickler cannot read a float (BINFLOAT: every
#   optimizer's learning rate), and its torch.load ignores a pickle_module
#   unless weights_only is True; so there the pickle's globals are checked the
#   same way before loading (the opcodes that name a callable: GLOBAL and
#   INST, the others refused), and then it is loaded as a whole.
#   weights_only=False loads full pickle: for a directory only its owner can
#   write. CUDA tensors load onto this rank's device, not the saving rank's:
#   the current CUDA device when the process has initialized CUDA
#   (torch.cuda.set_device(LOCAL_RANK) does), else the CPU.
def _own_device_map() -> Dict[str, str]:
    target = "cpu"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        target = f"cuda:{torch.cuda.current_device()}"
    where = {f"cuda:{i}": target for i in range(256)}
    where["cuda"] = target
    return where


def _torch_load(payload: "_PayloadWindow", step: int, weights_only: bool, map_location: Any,
                args: Dict[str, Any]) -> Any:
    """torch.load of a checkpoint's payload under Note [Loading what was saved]."""
    if "weights_only" not in args and "pickle_module" not in args:
        if weights_only and int(torch.__version__.split(".")[0]) < 2:
            _check_loadable(payload, step, "torch.load")  # then its globals are safe
            args = dict(args, weights_only=False)
        else:
            args = dict(args, weights_only=weights_only)
    payload.seek(0)
    return torch.load(payload, map_location=map_location, **args)


def _pickle_globals(payload: IO[bytes]) -> List[str]:
    """The globals a torch.save archive's pickle names ("module.name")."""
    payload.seek(0)
    with zipfile.ZipFile(payload) as z:
        pickled = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pickled:
            return []
        data = z.read(pickled[0])
    names = []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            names.append(str(arg).replace(" ", "."))
        elif op.name in ("STACK_GLOBAL", "EXT1", "EXT2", "EXT4", "OBJ"):
            names.append(f"(a global by {op.name}, which is not checked)")
    return names


def _check_loadable(payload: IO[bytes], step: int, when: str = "save") -> None:
    find = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if find is not None:
        payload.seek(0)
        unsafe = sorted(set(find(payload)))
    else:
        from torch import _weights_only_unpickler
        allowed = set(_weights_only_unpickler._get_allowed_globals())
        unsafe = sorted({g for g in _pickle_globals(payload) if g not in allowed})
    if not unsafe:
        return
    shown = ", ".join(unsafe[:6]) + (f" and {len(unsafe) - 6} more" if len(unsafe) > 6 else "")
    if when != "save":
        raise _core.Error(
            f"checkpoint of step {step} holds {shown}, which weights_only=True does not load "
            f"(Checkpointer(..., weights_only=False) loads full pickle, for a directory only "
            f"you can write; Note [Loading what was saved])")
    raise _core.InvalidArgument(
        f"Checkpointer.save: the state of step {step} holds {shown}, which "
        f"torch.load(weights_only=True) refuses: the requeued job could not load it. Keep "
        f"tensors and plain Python values in the state (torch.from_numpy, .tolist(), a "
        f"class's state_dict()), allow the types with torch.serialization."
        f"add_safe_globals (torch >= 2.4, before save and load), or pass "
        f"Checkpointer(..., weights_only=False) for a directory only you can write "
        f"(Note [Loading what was saved])")


class _PayloadWindow(io.RawIOBase):
    """The payload of a checkpoint file as a read-only, seekable file of its
    own: bytes [offset, offset + size) of `file` (a _core.CheckpointFile or
    CheckpointWriter, kept open by this), read with os.preadv straight into the
    reader's buffer (Note [Streaming checkpoints]). What torch.load and
    zipfile read, without the payload ever being in memory as bytes. No
    fileno(): torch would read the descriptor from its own offset."""

    def __init__(self, file: Any, offset: int, size: int) -> None:
        super().__init__()
        self._file, self._fd = file, file.fileno()
        self._offset, self._size, self._pos = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - self._pos))
        done = 0
        while done < want:
            n = os.preadv(self._fd, [view[done:want]], self._offset + self._pos + done)
            if n == 0:
                raise _core.Error(
                    f"checkpoint {self._file.path} is damaged: it ended at "
                    f"{self._offset + self._pos + done} bytes while its payload was read; "
                    f"expected {self._offset + self._size}")
            done += n
        self._pos += done
        return done

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + pos < 0:
            raise ValueError(f"negative seek position {base + pos}")
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._file = None
        super().close()


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

    ``weights_only`` (default True): the state is loaded with
    ``torch.load(weights_only=True)`` on every torch, and ``save()`` refuses a
    state that could not be loaded so, naming what it holds (Note [Loading
    what was saved]); False: full pickle, for a directory only you can write.
    Saving a step again cannot mix its old and new files; a fresh start while
    other jobs' checkpoints lie beside this one's is said on stderr (Note
    [Saving a step again]).

    ``run_id`` and ``restart_count`` name the run for loggers. ``group``: a
    Gloo group over every rank (default: the package's own, made here when
    torch.distributed is initialized: construct the Checkpointer on every
    rank, after init_process_group; Note [The side group]).
    """

    def __init__(self, directory: str = "checkpoints", *, keep: int = 2, scope: str = "rank0",
                 per_job: bool = True, weights_only: bool = True,
                 group: Optional[Any] = None) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise _core.InvalidArgument(f"Checkpointer: keep={keep!r}; expected an integer >= 1")
        if scope not in _SCOPES:
            raise _core.InvalidArgument(
                f"Checkpointer: scope={scope!r}; expected one of {', '.join(_SCOPES)}")
        if not directory:
            raise _core.InvalidArgument("Checkpointer: the directory is empty")
        if not isinstance(weights_only, bool):
            raise _core.InvalidArgument(
                f"Checkpointer: weights_only={weights_only!r}; expected True or False")
        self.base = directory
        self.dir = _core.job_checkpoint_dir(directory) if per_job else directory
        self.weights_only = weights_only
        self.keep = keep
        self.scope = scope
        self.per_job = per_job
        self.run_id = run_id()
        self.restart_count = restart_count()
        self._group_arg = group
        _core.make_private_dirs(self.dir)  # 0700 (Note [Planted files])
        self._claim = _RunClaim(self.dir, per_job)
        if group is None and dist.is_available() and dist.is_initialized():
            _cpu_group(None)  # Note [The side group]: now, while every rank is here

    def _world(self) -> Tuple[int, int, Optional[Any]]:
        group = _cpu_group(self._group_arg)
        return dist.get_rank(group), dist.get_world_size(group), group

    def save(self, step: int, state: Any, *, sampler: Any = None) -> str:
        """Writes checkpoint ``step`` (collective; see the class). Returns its directory."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise _core.InvalidArgument(f"Checkpointer.save: step={step!r}; expected an "
                                        f"integer >= 0")
        rank, world, group = self._world()
        self._claim.ensure(rank, world, group, "Checkpointer.save")
        sdir = os.path.join(self.dir, f"step-{step}")
        _core.make_private_dirs(sdir)
        if rank == 0:
            _unmark_complete(sdir)  # Note [Saving a step again]
        writer: Optional[_core.CheckpointWriter] = None
        error: Optional[Exception] = None
        try:
            try:
                # Note [Streaming checkpoints]: torch.save writes through the
                # checksum into a temporary file, renamed into place at commit()
                writer = _core.CheckpointWriter(sdir, f"rank-{rank}.ckpt", step, rank, world,
                                                _sampler_text(sampler))
                if self.scope == "every_rank" or rank == 0:
                    torch.save(state, writer)
                    if self.weights_only:
                        writer.flush()
                        with _PayloadWindow(writer, writer.payload_offset,
                                            writer.payload_bytes) as payload:
                            _check_loadable(payload, step)
            except _core.Error as e:  # a state torch could not load, a full disk
                error = e
            # every rank knows that every state was serialized and written, and
            # rank 0's COMPLETE of an earlier save of this step is gone
            _agree_or_raise(error, rank, world, group, f"Checkpointer.save: step {step}")
            assert writer is not None
            writer.commit()
        finally:
            if writer is not None:
                writer.abort()  # a no-op once committed
        dist.barrier(group=group)  # every rank's file is durable
        if rank == 0:
            _core.write_atomic(sdir, "COMPLETE",
                               f"complete step={step} world={world} scope={self.scope} "
                               f"run={self.run_id}{self._claim.marker()}\n")
            _core.write_atomic(self.dir, "LATEST", f"step-{step}\n")
            _core.prune_checkpoints(self.dir, step, self.keep)
        dist.barrier(group=group)  # nobody goes on before the checkpoint is complete
        return sdir

    def _tell_other_runs(self) -> None:
        """Note [Saving a step again]: a fresh start beside other runs' checkpoints is said."""
        others = []
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            return
        own = os.path.basename(os.path.normpath(self.dir))
        for name in names:
            if not name.startswith("job-") or name == own:
                continue
            steps = _complete_steps_in(os.path.join(self.base, name))
            if steps:
                others.append((name, steps[0]))
        if not others:
            return
        shown = ", ".join(f"{n} (step {st})" for n, st in others[:5])
        if len(others) > 5:
            shown += f" and {len(others) - 5} more"
        name = others[-1][0]
        print(f"slurmddp: starting from scratch: no checkpoint of this run ({self.run_id}) in "
              f"{self.dir}, while {self.base} holds checkpoints of other jobs: {shown}. A job "
              f"submitted again by hand is a new run; to continue one, pass its directory: "
              f"Checkpointer({os.path.join(self.base, name)!r}, per_job=False)",
              file=sys.stderr, flush=True)

    def complete_steps(self) -> List[int]:
        """The steps of the complete checkpoints in the directory, newest first
        (local: no communication)."""
        return _complete_steps_in(self.dir)

    def _read(self, step: int, rank: int, world: int) -> Tuple[str, "_PayloadWindow"]:
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
        self._claim.check(marker, sdir)
        if marker.get("scope") not in (None, self.scope):
            raise _core.InvalidArgument(
                f"Checkpointer: {sdir} was saved with scope={marker['scope']!r}, this "
                f"Checkpointer has scope={self.scope!r}")

        def rank_file(who: int, verify: bool) -> _core.CheckpointFile:
            path = os.path.join(sdir, f"rank-{who}.ckpt")
            f = _core.CheckpointFile(path, verify)
            if (f.step, f.rank, f.world) != (step, who, world):
                raise _core.Error(
                    f"checkpoint {path} holds step {f.step} of rank {f.rank} in a world of "
                    f"{f.world}; expected step {step} of rank {who} in a world of {world}")
            return f

        # Note [Streaming checkpoints]: each rank verifies its own file's
        # checksum; rank 0's payload, which every rank loads with rank-0 scope,
        # is verified by rank 0, and the others check its structure
        own = rank_file(rank, verify=True)
        source = own
        if self.scope == "rank0" and rank != 0:
            source = rank_file(0, verify=False)
        return own.sampler(), _PayloadWindow(source, source.payload_offset, source.payload_bytes)

    def load_latest(self, *, map_location: Any = None, **torch_load_args: Any) -> Optional[Resumed]:
        """The newest usable checkpoint on every rank, or None (collective; see
        the class). ``map_location`` and other keywords go to ``torch.load``;
        by default CUDA tensors load onto this rank's current CUDA device when
        the process uses CUDA (``torch.cuda.set_device``), else onto the CPU,
        and ``weights_only`` is the Checkpointer's (Note [Loading what was
        saved])."""
        rank, world, group = self._world()
        self._claim.ensure(rank, world, group, "Checkpointer.load_latest")
        if map_location is None:
            map_location = _own_device_map()
        # the group spans every rank, so its rank 0 is the global one
        steps = _broadcast_steps(self.complete_steps() if rank == 0 else [], 0, group)
        if not steps and rank == 0 and self.per_job:
            self._tell_other_runs()
        refused: List[str] = []
        for step in steps:
            reason = ""
            try:
                sampler, payload = self._read(step, rank, world)
            except _core.InvalidArgument:
                raise
            except _core.Error as e:
                reason = str(e)
            except Exception as e:  # noqa: BLE001 (MemoryError, OSError: agreed, not a hang)
                reason = f"checkpoint: rank {rank} failed to read {self.dir}/step-{step}: " \
                         f"{type(e).__name__}: {e}"
            why = _refusals(reason, rank, world, group)
            if not why:
                with payload:
                    state = _torch_load(payload, step, self.weights_only, map_location,
                                        torch_load_args)
                if refused and rank == 0:
                    print(f"slurmddp: resuming from {self.dir}/step-{step}, the newest usable "
                          f"checkpoint", file=sys.stderr, flush=True)
                return Resumed(step, state, _sampler_state(sampler),
                               os.path.join(self.dir, f"step-{step}"))
            refused.append(f"step-{step} ({why})")
            if rank == 0:
                print(f"slurmddp: refusing checkpoint {self.dir}/step-{step}: {why}; trying the "
                      f"previous one", file=sys.stderr, flush=True)
        if refused:
            raise _core.Error(
                f"Checkpointer: no usable checkpoint in {self.dir}: {'; '.join(refused)}; not "
                f"starting from scratch (remove the directory to start a fresh run)")
        return None
