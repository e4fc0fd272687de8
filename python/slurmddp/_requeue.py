"""Requeue: the restart count, the run's id, scontrol requeue and exit 75
(slurmddp.resume)."""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

import torch.distributed as dist

from . import _core
from ._collectives import _cpu_group


# The exit status of a rank that stopped after a checkpoint and wants to be run
# again (EX_TEMPFAIL, "try again"): the batch script requeues on it, or
# slurm.conf's RequeueExit=75 makes Slurm do so itself.
EXIT_REQUEUE = 75


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
    # The requeue ends the step: what this rank printed goes out first.
    sys.stdout.flush()
    sys.stderr.flush()
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        _requeue_or_say_why()
    if distributed:
        dist.barrier(group=_cpu_group(group))
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.exit(EXIT_REQUEUE)
