"""The checks' and checkpoints' own Gloo group and collectives
(slurmddp.resume)."""
from __future__ import annotations

import atexit
import collections
import time
from datetime import timedelta
from typing import Any, List, Optional

import torch
import torch.distributed as dist

from . import _core
from . import torch as _sdtorch  # noqa: F401 (its exit hooks first: they run last)


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



def _forget_side_group(destroyed: Optional[Any]) -> None:
    """destroy_process_group(destroyed) ran: the side group ends with the default
    group (destroyed None) or by itself (Note [The side group])."""
    global _side_group
    if destroyed is None or destroyed is _side_group:
        _side_group = None

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
