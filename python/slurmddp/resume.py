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

# One module per job (docs/architecture.md): the agreed stop, the checkpoints, the
# requeue, and the Gloo group their collectives run on.
from . import torch as _sdtorch  # noqa: F401 (slurmddp:// registered, its exit hooks first)
from ._checkpoint import Checkpointer, Resumed
from ._requeue import EXIT_REQUEUE, requeue, requeue_and_exit, restart_count, run_id
from ._stop import DEFAULT_SIGNALS, StopSignal  # noqa: F401 (DEFAULT_SIGNALS: public, not in __all__)

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

for _public in (Checkpointer, Resumed, StopSignal, requeue, requeue_and_exit, restart_count,
                run_id):
    _public.__module__ = __name__  # where users find them (help(), repr)
del _public
