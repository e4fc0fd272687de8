"""slurm-ddp for PyTorch.

Importing this module registers the ``slurmddp://`` rendezvous::

    import torch.distributed as dist
    import slurmddp.torch

    dist.init_process_group("nccl", init_method="slurmddp://")

Rank 0 hosts slurm-ddp's store on ``MASTER_PORT``; every rank proves the
step's ``SLURMDDP_TOKEN`` (which the plugin gives every task) before it may
read or write a key, so a stranger who reaches the port is refused and
logged, instead of reading torch's pickled data. A rank that does not arrive
within the timeout (``SLURMDDP_TIMEOUT`` when set, else ``init_process_group``'s
``timeout``) makes every waiting rank raise ``slurmddp.TimeoutError``:
"slurmddp:// rendezvous: 7/8 ranks joined; missing: [5] (hosts: n2 [5]); ...".
Everything after the rendezvous (Gloo, NCCL, DDP) is torch's own.

``DistributedSampler`` is a drop-in for ``torch.utils.data.DistributedSampler``.

``Progress`` answers "which rank, on which node, stuck where?" while the job
is still there: call ``progress.step_done(step)`` every step, and when a step
does not end within ``SLURMDDP_HANG_AFTER`` (default half the timeout, at most
5 minutes), or when the report signal reaches the step (``scancel
--signal=URG <job>``), one rank prints where every rank is, with the Python
stacks of the ranks that are not where the others are::

    hang report 1: step 1234: 7/8 ranks waiting in all_reduce (train.py:88
    (dist.all_reduce(t))); rank 5 on n2 at step 1234 for 312 s in train.py:61
    (batch = next(loader))
"""

# One module per job, as the C++ runtime is split (docs/architecture.md): the
# slurmddp:// init method and its Store, the sampler and loader, settle_ddp,
# the hang report, and torch's Gloo threads at exit. Importing this module
# wraps destroy_process_group and registers slurmddp:// with torch.
from . import _gloo_threads  # noqa: F401 (first: its exit hook runs last)
from ._ddp import settle_ddp
from ._init_method import SCHEME, Store
from ._progress import Progress
from ._sampler import DataLoader, DistributedSampler

__all__ = ["DataLoader", "DistributedSampler", "Progress", "Store", "SCHEME", "settle_ddp"]

for _public in (DataLoader, DistributedSampler, Progress, Store, settle_ddp):
    _public.__module__ = __name__  # where users find them (help(), repr)
del _public
