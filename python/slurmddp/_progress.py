"""Progress: the hang and straggler reports for PyTorch jobs (slurmddp.torch)."""
from __future__ import annotations

import atexit
import linecache
import os
import sys
import threading
import weakref
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Iterator, List, Optional, Tuple

import torch

from . import _core
from ._init_method import Store, _live_stores


# Where a rank is, from its Python stacks (Note [Progress records]).

# Files that are not the user's: the interpreter's library, installed
# packages (torch among them) and this package.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_NOT_USER = tuple({os.path.dirname(os.__file__), os.path.dirname(torch.__file__), _PACKAGE_DIR})
_C10D_FILES = ("distributed_c10d.py", "c10d_logger.py")


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    if "/site-packages/" in filename or "/dist-packages/" in filename:
        return False
    return not os.path.abspath(filename).startswith(_NOT_USER)


def _line(filename: str, lineno: int) -> str:
    source = linecache.getline(filename, lineno).strip()
    code, _, _ = source.partition(" #")  # a trailing comment (a "#" in a string is rare here)
    if code.count('"') % 2 == 0 and code.count("'") % 2 == 0:
        source = code.rstrip()
    if len(source) > 60:
        source = source[:57] + "..."
    where = f"{os.path.basename(filename)}:{lineno}"
    return f"{where} ({source})" if source else where


def _locate(frame: Any) -> Tuple[str, str]:
    """(where, op) of a thread: its innermost line of user code, and the
    torch.distributed collective it is in (\"all_reduce\"), if any."""
    where, op = "", ""
    f = frame
    while f is not None:
        code = f.f_code
        name = os.path.basename(code.co_filename)
        if not op and name == "distributed_c10d.py" and not code.co_name.startswith("_"):
            op = code.co_name
        if not where and _is_user_file(code.co_filename):
            where = _line(code.co_filename, f.f_lineno)
            break
        f = f.f_back
    if not where and frame is not None:
        where = _line(frame.f_code.co_filename, frame.f_lineno)
    return where, op


def _stacks(skip: int) -> str:
    """Every thread's stack but `skip`'s, innermost call first, as faulthandler prints them."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out: List[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        out.append(f"Thread {ident:#x} ({names.get(ident, '?')}), most recent call first:")
        f = frame
        while f is not None:
            out.append(f'  File "{f.f_code.co_filename}", line {f.f_lineno} in {f.f_code.co_name}')
            f = f.f_back
    return "\n".join(out)


def _describe(full: bool) -> Tuple[str, str, str]:
    main = sys._current_frames().get(threading.main_thread().ident)
    where, op = _locate(main)
    return where, op, _stacks(threading.get_ident()) if full else ""


_live_progress: "weakref.WeakSet[Progress]" = weakref.WeakSet()


@atexit.register
def _close_all_progress() -> None:
    for p in list(_live_progress):
        p.close()


class Progress:
    """The hang report for a PyTorch job (Note [Progress records]).

    ::

        dist.init_process_group("nccl", init_method="slurmddp://")
        progress = slurmddp.torch.Progress()
        for step, batch in enumerate(loader):
            ...
            progress.step_done(step)

    ``step_done`` costs one atomic store (no store traffic). A watchdog
    thread polls the step's store every few seconds (at most every 5 s); when
    this rank's step has not ended for ``hang_after`` (``SLURMDDP_HANG_AFTER``
    when set; default half the group's timeout, at most 5 minutes; 0: never),
    or the report signal reached the process (``SLURMDDP_REPORT_SIGNAL``,
    default SIGURG: ``scancel --signal=URG <job>``; "none": off), every rank
    answers with where its main thread is (its innermost line of your code,
    and the torch.distributed collective it is in) and all its threads'
    stacks; one rank logs a single report, then the stacks of the ranks that
    are elsewhere. A rank that cannot answer (stopped, or holding the GIL) is
    named from its last heartbeat. Works with torch's NCCL and Gloo groups:
    it uses only slurm-ddp's store.

    The straggler report (Note [Straggler windows]): every
    ``straggler_every`` steps (``SLURMDDP_STRAGGLER_EVERY``; default 0: off)
    rank 0 names the ranks whose own time is over ``SLURMDDP_STRAGGLER_RATIO``
    (1.5) times the median, e.g. "straggler report, steps 100-199: rank 5 on
    n2: 4.0x the median (data 120 vs 30 ms a step) for 100 steps; the others
    wait for it". slurm-ddp does not see torch's collectives: iterate through
    ``progress.loader(loader)`` to time the data, and wrap explicit waits in
    ``with progress.waiting("all_reduce"):`` to tell compute from waiting.

    ``store``: the ``slurmddp://`` rendezvous's store (default: the one
    ``init_process_group`` used in this process). ``hang_after`` and
    ``straggler_every`` override the variables.
    """

    def __init__(self, store: Optional[Store] = None, *,
                 hang_after: Optional[timedelta] = None,
                 straggler_every: Optional[int] = None) -> None:
        if store is None:
            if not _live_stores:
                raise _core.InvalidArgument(
                    "Progress: no slurmddp:// rendezvous in this process; call "
                    "init_process_group(..., init_method=\"slurmddp://\") first, or pass store=")
            store = _live_stores[-1]
        r = store._rendezvous
        if r is None:
            raise _core.InvalidArgument(
                "Progress: the store did not come from the slurmddp:// rendezvous (it carries no "
                "rank, world size or node); use init_method=\"slurmddp://\"")
        timeout_ms = max(1, int(store.timeout.total_seconds() * 1000))
        hang_after_ms = None if hang_after is None else int(hang_after.total_seconds() * 1000)
        self._watch = _core.Watch(store._store, r.rank, r.world_size, r.node, "slurmddp/torch",
                                  timeout_ms, _describe, hang_after_ms, straggler_every)
        self.rank = r.rank
        self.world_size = r.world_size
        _live_progress.add(self)

    def step_done(self, step: int) -> None:
        """This rank completed training step ``step``."""
        self._watch.step_done(step)

    def loader(self, iterable: Any) -> Iterator[Any]:
        """Yields ``iterable``'s items, timing the wait for each as data time."""
        it = iter(iterable)
        watch = self._watch
        while True:
            watch.data_enter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                watch.data_leave()
            yield item

    @contextmanager
    def waiting(self, op: str) -> Iterator[None]:
        """Marks a wait in collective ``op`` (e.g. around ``dist.all_reduce``)."""
        self._watch.enter(op)
        try:
            yield
        finally:
            self._watch.leave()

    def report(self) -> None:
        """Asks for a report now, as the report signal does."""
        self._watch.request()

    @property
    def reports_printed(self) -> int:
        """Reports this rank printed (it prints those it asked for)."""
        return self._watch.printed

    def close(self) -> None:
        """Stops the watchdog; also done at exit."""
        self._watch.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
