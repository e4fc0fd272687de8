"""torch's Gloo threads at exit and at destroy_process_group (slurmddp.torch)."""
from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from typing import Any, List

import torch.distributed as dist



# Note [Gloo's threads at exit]
#   A torch Gloo collective keeps the state of the thread that started it, and
#   on torch 2.15 that holds Python objects (backward() stashes its contextvars
#   context in the thread's TLS, so DDP's all-reduces capture it, and a later
#   barrier keeps those works). torch's Gloo thread drops a finished work a
#   moment after wait() returns, which takes the GIL; when the program exits
#   right after its last collective (dist.barrier(); destroy_process_group()),
#   the interpreter may be finalizing by then, and Python ends that thread
#   inside torch's noexcept loop: "terminate called without an active
#   exception", the rank dead by SIGABRT after its work was done (1 in about
#   150 rank exits on torch 2.15 here; the core names AsyncBarrierWork's
#   ThreadLocalState). So at exit, while other threads may still take the GIL,
#   this waits until torch's Gloo threads have been asleep for _QUIET_S with
#   the GIL free (at most _EXIT_WAIT_S in all): a thread waiting for the GIL
#   gets it and finishes meanwhile.
_EXIT_WAIT_S = 1.0
_QUIET_S = 0.005


def _gloo_thread_states() -> List[str]:
    """The state letter (R, S, ...) of each thread here that may be torch's
    Gloo's: those named pt_gloo* (newer torch names them), and on a torch
    that leaves them unnamed (2.6) every thread but the caller."""
    states, named, others = [], [], []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return states
    me = str(threading.get_native_id())
    for tid in tasks:
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        state = stat[stat.rfind(")") + 2:][:1]
        if stat[stat.find("(") + 1:stat.rfind(")")].startswith("pt_gloo"):
            named.append(state)
        else:
            others.append(state)
    return named if named else others


@atexit.register
def _let_gloo_threads_finish() -> None:
    if not _gloo_thread_states():
        return
    deadline = time.monotonic() + _EXIT_WAIT_S
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.001)  # the GIL is free meanwhile
        now = time.monotonic()
        if "R" in _gloo_thread_states():
            quiet_since = now
        elif now - quiet_since >= _QUIET_S:
            return


# Note [Gloo's threads at destroy_process_group]
#   The same wait as at exit (Note [Gloo's threads at exit]) before
#   destroy_process_group: it drops the process group while holding the GIL,
#   and ProcessGroupGloo's destructor joins its threads; one that is about to
#   drop the work of the collective just before (dist.barrier();
#   destroy_process_group()) waits for that GIL: a deadlock, the rank hung at
#   its last line with its threads in futex waits (torch 2.6, Python 3.13:
#   twice in about 40 runs of a test whose ranks end so, beside other CPU
#   load; the waiting thread's mutex is the GIL's). torch 2.6 leaves its
#   Gloo threads unnamed, so there every other thread is watched. With the wait
#   the same test ran 8 times beside two busy CPUs without a hang (before: 1
#   hang in 8). destroy_process_group is wrapped here for that; slurmddp.resume
#   adds what it must do first (_before_destroy).
_before_destroy: List[Any] = []


def _wrap_destroy() -> None:
    from torch.distributed import distributed_c10d
    original = distributed_c10d.destroy_process_group
    if getattr(original, "_slurmddp_wrapped", False):
        return

    @functools.wraps(original)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        for hook in list(_before_destroy):
            hook(*args, **kwargs)
        _let_gloo_threads_finish()
        return original(*args, **kwargs)

    destroy_process_group._slurmddp_wrapped = True  # type: ignore[attr-defined]
    distributed_c10d.destroy_process_group = destroy_process_group
    if getattr(dist, "destroy_process_group", None) is original:
        dist.destroy_process_group = destroy_process_group


if dist.is_available():
    _wrap_destroy()
