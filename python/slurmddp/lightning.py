"""slurm-ddp for PyTorch Lightning: the agreed stop, exact resume and the hang
report for a Lightning ``Trainer``, through Lightning's own extension points::

    from slurmddp.lightning import SlurmDDP

    ddp = SlurmDDP("checkpoints")                 # first: keeps a stop signal that comes early
    trainer = L.Trainer(..., callbacks=[ddp])
    trainer.fit(model, datamodule=dm, ckpt_path=ddp.ckpt_path)

Under ``srun`` with the plugin, ``SlurmDDP`` (a ``Callback``):

* joins the ``slurmddp://`` rendezvous before the Trainer would start its own
  ``env://`` one (Lightning uses a process group that already exists), so a
  rank that does not arrive is named, and the hang report has its store;
* replaces Lightning's handlers for the stop signals (its SIGUSR1 auto-requeue,
  which saves from rank 0 whatever step each rank is at, and its SIGTERM
  handler, which ends the fit without a checkpoint) with
  ``slurmddp.StopSignal``: every rank stops after the same optimizer step;
* writes that step's checkpoint with ``Trainer.save_checkpoint`` (Lightning's
  whole state: model, optimizers, schedulers, loops, callbacks, a resumable
  loader's position) into ``slurmddp.Checkpointer``'s layout: atomic, with a
  checksum and a COMPLETE marker, ``keep`` of them, per job;
* has rank 0 requeue the job and every rank exit with ``EXIT_REQUEUE`` (75);
* reports the step of every rank to ``slurmddp.torch.Progress``: a hang names
  the ranks, their hosts and their lines.

``ddp.ckpt_path`` is this job's checkpoint directory once it holds a complete
checkpoint (else None: a fresh start); the Trainer loads it through the
``CheckpointIO`` that ``SlurmDDP`` installs, which takes the newest checkpoint
every rank can read and falls back past a damaged one, never silently to
scratch. For a mid-epoch resume without replayed or skipped batches, the
training loader must be resumable: ``slurmddp.torch.DataLoader`` (the same
arguments as torch's) is. Lightning's own ``ModelCheckpoint`` files are written
as before.

Turning parts off: ``SlurmDDP(signals=())`` leaves the signals to Lightning
(no agreed stop), ``requeue=False`` exits 75 without ``scontrol requeue``,
``rendezvous=False`` lets Lightning make its ``env://`` group (no hang report
then). Strategies that write sharded checkpoints themselves (FSDP, DeepSpeed)
are refused at the first save: use ``slurmddp.ShardedCheckpointer`` there.
"""
from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
import torch.distributed as dist

from . import _core
from . import resume as _resume
from . import torch as _torch
from . import _checkpoint, _collectives, _ddp, _init_method, _requeue

try:  # the unified package first, as Lightning's docs import it
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.io import CheckpointIO as _CheckpointIO
except ImportError:  # pragma: no cover (depends on what is installed)
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
        from pytorch_lightning.plugins.io import CheckpointIO as _CheckpointIO  # type: ignore
    except ImportError:
        raise ImportError(
            "slurmddp.lightning needs PyTorch Lightning: pip install lightning (or "
            "pytorch-lightning)") from None

__all__ = ["SlurmDDP"]


def _ignore(signum: int, frame: Any) -> None:
    """Python's handler for the stop signals once SlurmDDP owns them: the
    StopSignal's handler in front of it has recorded the signal."""


def _under_plugin() -> bool:
    """A task of a Slurm step with the rendezvous variables, not a torchrun worker."""
    env = os.environ
    return all(v in env for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                   "SLURM_STEP_ID")) and "TORCHELASTIC_RUN_ID" not in env


class _CheckpointIOForSlurmDDP(_CheckpointIO):
    """The Trainer's CheckpointIO while SlurmDDP is attached: SlurmDDP's
    checkpoints go through slurmddp.Checkpointer, every other path (a
    ModelCheckpoint's files) to the CheckpointIO the strategy had."""

    def __init__(self, inner: Any, owner: "SlurmDDP") -> None:
        super().__init__()
        self.inner = inner
        self._owner = owner

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any,
                        storage_options: Optional[Any] = None) -> None:
        if str(path) == self._owner._capture_path:
            self._owner._captured = checkpoint  # written by SlurmDDP._save, on every rank
            return
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        if self._owner._is_own(path):
            return self._owner._load(kwargs.get("map_location"))
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class SlurmDDP(pl.Callback):
    """See the module. ``directory``, ``keep``, ``per_job`` and
    ``weights_only`` are ``slurmddp.Checkpointer``'s (``weights_only``
    defaults to False here: a Lightning checkpoint holds the hyperparameters,
    which may be any object; the per-job directory is private to its owner,
    Note [Planted files]). ``signals``: the stop signals (default SIGTERM,
    SIGUSR1, SIGUSR2, SIGHUP; ``()``: none). ``timeout``: the process group's
    (default: torch's). Make it before the Trainer, on every rank."""

    def __init__(self, directory: str = "checkpoints", *,
                 signals: Sequence[Union[int, signal.Signals]] = _resume.DEFAULT_SIGNALS,
                 keep: int = 2, per_job: bool = True, weights_only: bool = False,
                 requeue: bool = True, rendezvous: bool = True, settle: bool = True,
                 timeout: Optional[timedelta] = None) -> None:
        super().__init__()
        self.directory = directory
        self.keep = keep
        self.per_job = per_job
        self.weights_only = weights_only
        self.requeue = requeue
        self.settle = settle
        self._settle_pending = False
        self.stop: Optional[_resume.StopSignal] = \
            _resume.StopSignal(signals) if tuple(signals) else None
        self._signals = [int(s) for s in signals]
        self.dir = _core.job_checkpoint_dir(directory) if per_job else directory
        self.checkpointer: Optional[_resume.Checkpointer] = None
        self.progress: Optional[_torch.Progress] = None
        self.resumed: Optional[_resume.Resumed] = None
        self.stopped_at: Optional[int] = None
        self._capture_path = os.path.join(self.dir, "(being saved)")
        self._captured: Optional[Dict[str, Any]] = None
        self._checked_step = -1
        self._python_handlers: Dict[int, Any] = {}
        if rendezvous and dist.is_available() and not dist.is_initialized() and _under_plugin():
            # Note [Lightning's process group]
            backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, init_method="slurmddp://",
                                    **({"timeout": timeout} if timeout else {}))
        for s in self._signals:
            self._python_handlers[s] = signal.getsignal(s)

    # -- resume ------------------------------------------------------------
    @property
    def ckpt_path(self) -> Optional[str]:
        """For ``Trainer.fit(ckpt_path=)``: this job's checkpoint directory when
        it holds a complete checkpoint, else None (local: no communication)."""
        return self.dir if _checkpoint._complete_steps_in(self.dir) else None

    def _is_own(self, path: Any) -> bool:
        try:
            return os.path.realpath(str(path)) == os.path.realpath(self.dir)
        except (OSError, ValueError):
            return False

    def _load(self, map_location: Any) -> Dict[str, Any]:
        if self.checkpointer is None:
            raise _core.InvalidArgument(
                f"SlurmDDP: ckpt_path={self.dir!r} is SlurmDDP's, and its checkpoints are read "
                f"only while it is one of the Trainer's callbacks")
        resumed = self.checkpointer.load_latest(map_location=map_location)
        if resumed is None:
            raise _core.Error(
                f"SlurmDDP: ckpt_path={self.dir!r} holds no complete checkpoint (removed since "
                f"ckpt_path was read?); pass ckpt_path=None for a fresh start")
        self.resumed = resumed
        self._settle_pending = self.settle
        if dist.get_rank() == 0:
            print(f"slurmddp.lightning: resuming from {resumed.path} at step {resumed.step}, run "
                  f"{_resume.run_id()}, restart count {_resume.restart_count()}",
                  file=sys.stderr, flush=True)
        if not isinstance(resumed.state, dict):
            raise _core.Error(f"SlurmDDP: {resumed.path} does not hold a Lightning checkpoint")
        return resumed.state

    # -- Callback hooks ----------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if not dist.is_available():
            raise _core.InvalidArgument("SlurmDDP: this torch has no torch.distributed")
        if not dist.is_initialized():
            # One process outside a distributed strategy (a run on a laptop):
            # the stop and the checkpoints work on a group of one.
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        self.checkpointer = _resume.Checkpointer(self.directory, keep=self.keep,
                                                 per_job=self.per_job,
                                                 weights_only=self.weights_only)
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, _CheckpointIOForSlurmDDP):
            trainer.strategy.checkpoint_io = _CheckpointIOForSlurmDDP(io, self)
        if self.progress is None and _init_method._live_stores:
            self.progress = _torch.Progress()
        elif self.progress is None and dist.get_rank() == 0:
            print("slurmddp.lightning: no hang report: the process group was not made by the "
                  "slurmddp:// rendezvous (torchrun, or rendezvous=False)",
                  file=sys.stderr, flush=True)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._take_signals(trainer)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self._settle_pending:
            self._settle_pending = False
            self._settle_ddp(trainer, pl_module, batch, batch_idx)

    def _settle_ddp(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Note [Settling Lightning's DDP]."""
        model = trainer.strategy.model
        if not isinstance(model, torch.nn.parallel.DistributedDataParallel) or \
                not pl_module.automatic_optimization:
            return
        buffers = {name: b.detach().clone() for name, b in pl_module.named_buffers()}
        try:
            _ddp._settle(model, lambda: trainer.strategy.training_step(batch, batch_idx))
        finally:
            with torch.no_grad():
                for name, b in pl_module.named_buffers():
                    if name in buffers:
                        b.copy_(buffers[name])

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = int(trainer.global_step)
        if self.progress is not None:
            self.progress.step_done(step)
        # A check after each optimizer step: the same steps on every rank, and
        # never between the micro-batches of one (gradient accumulation).
        if self.stop is None or step == self._checked_step:
            return
        self._checked_step = step
        if self.stop.should_stop(step):
            self._save_and_exit(trainer, step)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    # -- the stop ----------------------------------------------------------
    def _take_signals(self, trainer: Any) -> None:
        """Note [Lightning's signal handlers]."""
        if self.stop is None:
            return
        taken: List[str] = []
        for s in self._signals:
            now = signal.getsignal(s)
            if now is self._python_handlers.get(s) or now is _ignore:
                continue
            signal.signal(s, _ignore)
            taken.append(_core.signal_name(s))
        if taken:
            self.stop._live().reinstall()  # ours back in front, before Lightning's teardown
            if dist.get_rank() == 0:
                print(f"slurmddp.lightning: Lightning's handlers for {', '.join(taken)} are "
                      f"replaced by SlurmDDP's agreed stop (a checkpoint after the same step "
                      f"on every rank, then requeue); SlurmDDP(signals=()) keeps Lightning's",
                      file=sys.stderr, flush=True)

    def _save_and_exit(self, trainer: Any, step: int) -> None:
        assert self.stop is not None and self.checkpointer is not None
        rank = dist.get_rank()
        self._captured = None
        self._capture_path = os.path.join(self.dir, f"step-{step}", "(being saved)")
        # Lightning's whole state, through the strategy (rank 0 hands it to the
        # CheckpointIO, which keeps it for the Checkpointer)
        trainer.save_checkpoint(self._capture_path, weights_only=False)
        state = self._captured
        self._captured = None
        if rank == 0 and state is None:
            raise _core.Error(
                f"SlurmDDP: the strategy {type(trainer.strategy).__name__} did not pass the "
                f"checkpoint through its CheckpointIO (a sharded strategy writes its own); "
                f"SlurmDDP checkpoints DDP strategies: use slurmddp.ShardedCheckpointer there")
        self.checkpointer.save(step, state if rank == 0 else None)
        self.stopped_at = step
        print(f"slurmddp.lightning: rank {rank}: stopped after step {step} on "
              f"{self.stop.signal_name}, checkpoint in {self.checkpointer.dir}", flush=True)
        if self.requeue and rank == 0:
            _requeue._requeue_or_say_why()
        dist.barrier(group=_collectives._cpu_group(None))
        sys.stdout.flush()
        # Lightning's way out of a fit (its SIGTERMException is a SystemExit):
        # on_exception hooks, its teardown, then the status reaches the shell.
        raise SystemExit(_resume.EXIT_REQUEUE)


# Note [Lightning's process group]
#   Lightning makes its process group with env:// in the strategy's setup,
#   unless one exists (lightning.fabric's _init_dist_connection returns early).
#   SlurmDDP makes it in its constructor with slurmddp://, so that a missing
#   rank is named and the hang report has its store, on a backend for both
#   devices where CUDA is present (torch >= 2.0's "cpu:gloo,cuda:nccl"; the
#   Trainer's accelerator is not known yet), Gloo elsewhere. Under torchrun
#   (TORCHELASTIC_RUN_ID) and outside a Slurm step it leaves the group to
#   Lightning.
#
# Note [Settling Lightning's DDP]
#   A resumed fit wraps the model in a new DistributedDataParallel, whose first
#   iteration reduces in a bucket layout other than the one the uninterrupted
#   run had at that step (slurmddp.torch.settle_ddp): with more than two ranks
#   the sums differ in the last bits. Lightning restores the weights before it
#   wraps the model, so settle_ddp cannot run before the restore as in a loop of
#   one's own; SlurmDDP runs it at the first batch after a resume, on that batch
#   through the strategy's training_step (DDP's forward of the LightningModule's
#   training_step, as the Trainer's own step calls it; its output's
#   loss back-propagated, no optimizer step, gradients cleared), with the random
#   number generators and the module's buffers (batch-norm statistics) put back.
#   What training_step logs there is logged once more. Skipped under manual
#   optimization (training_step would step the optimizers) and with settle=False.
#
# Note [Lightning's signal handlers]
#   The Trainer installs its handlers when a fit starts, after the callbacks'
#   setup: SIGTERM always (it ends the fit with SIGTERMException and no
#   checkpoint; Lightning 2.6 also broadcasts from inside the handler, on the
#   rank that got the signal only), and with SLURMEnvironment's auto_requeue
#   SIGUSR1 (rank 0 saves an hpc checkpoint wherever the other ranks are and
#   requeues). Both replace the StopSignal's handler with Python's. At
#   on_train_start, the first hook after that, Python's handler for each stop
#   signal that Lightning changed becomes a no-op and the StopSignal's goes back
#   in front of it: the signal is recorded and acted on at the next agreed
#   check only. A signal in the instant between the Trainer's installation and
#   on_train_start reaches Lightning's handler alone. The Trainer's teardown
#   puts back the handlers it found, after the checkpoint.
