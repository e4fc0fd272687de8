"""slurm-ddp for Python.

The C++ runtime's sampler and authenticated rendezvous, for programs that
train under srun with slurm-ddp's plugin installed:

* ``slurmddp.Sampler``: the shard of one rank, per epoch, handed out in
  blocks; mode ``"torch"`` reproduces PyTorch's DistributedSampler index for
  index, mode ``"scalable"`` needs O(1) memory at any dataset size.
* ``slurmddp.rendezvous()``: this task's identity from the environment, the
  step's authenticated store (``SLURMDDP_TOKEN``) and a join that names the
  ranks (and hosts) that did not arrive.

PyTorch users import ``slurmddp.torch``: a drop-in
``DistributedSampler`` and the ``init_method="slurmddp://"`` rendezvous for
``torch.distributed.init_process_group``; and, for preemption and requeue
(``slurmddp.resume``, imported on first use: it needs torch),
``slurmddp.StopSignal``, ``slurmddp.Checkpointer``, ``slurmddp.requeue()``,
``slurmddp.requeue_and_exit()``, ``slurmddp.EXIT_REQUEUE``,
``slurmddp.run_id()`` and ``slurmddp.restart_count()``; for sharded state
(FSDP, DTensor) through torch.distributed.checkpoint,
``slurmddp.ShardedCheckpointer`` (``slurmddp.sharded``).
"""
from typing import Any

from ._core import (
    Error,
    InvalidArgument,
    PeerError,
    ProtocolError,
    Rendezvous,
    Sampler,
    Store,
    TimeoutError,
    __version__,
    connect,
    in_process_store,
    rendezvous,
)

__all__ = [
    "Error",
    "InvalidArgument",
    "PeerError",
    "ProtocolError",
    "Rendezvous",
    "Sampler",
    "Store",
    "TimeoutError",
    "__version__",
    "connect",
    "in_process_store",
    "rendezvous",
]

# slurmddp.resume's names, served by __getattr__ below.
_RESUME = ("EXIT_REQUEUE", "Checkpointer", "Resumed", "StopSignal", "requeue", "requeue_and_exit",
           "restart_count", "run_id")
__all__ += _RESUME
__all__ += ["ShardedCheckpointer"]  # slurmddp.sharded (torch.distributed.checkpoint)


def __getattr__(name: str) -> Any:
    # slurmddp.resume imports torch: only when one of its names is used.
    if name in _RESUME:
        from . import resume
        return getattr(resume, name)
    if name == "ShardedCheckpointer":
        from . import sharded
        return sharded.ShardedCheckpointer
    raise AttributeError(f"module 'slurmddp' has no attribute {name!r}")
