"""StopSignal: one agreed stop on every rank (slurmddp.resume)."""
from __future__ import annotations

import atexit
import signal
import socket
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import _core
from . import _collectives, _gloo_threads
from ._collectives import _cpu_group, _gather_texts, _keep


DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)


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
    _finish_checks()
    _collectives._forget_side_group(args[0] if args else kwargs.get("group"))


# slurmddp.torch wraps destroy_process_group (Note [Gloo's threads at destroy_process_group])
_gloo_threads._before_destroy.append(_before_destroy)


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
