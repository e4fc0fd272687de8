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
``torch.distributed.init_process_group``.
"""
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
