"""Checkpoints of sharded state (FSDP, DTensor) through torch.distributed.checkpoint.

Large models keep their state in shards: FSDP's and DTensor's state dicts are
saved by every rank at once with ``torch.distributed.checkpoint`` (DCP), which
writes each rank's shards to its own files and a metadata file, and loads into
a state dict of the same shape in place (resharding when the layout changed).
``ShardedCheckpointer`` wraps that in the same agreement as ``Checkpointer``::

    ckpt = slurmddp.ShardedCheckpointer("checkpoints")   # after init_process_group
    state = {"model": model.state_dict(), "optim": optim_state}  # e.g. get_state_dict(...)
    if (c := ckpt.load_latest(state)) is not None:        # loads into `state`
        set_state_dict(...); sampler.load_state_dict(c.sampler); step = c.step
    ...
        if stop.should_stop(step):
            ckpt.save(step, state, sampler=sampler)
            slurmddp.requeue_and_exit()

Note [Sharded checkpoints]
  The layout is Checkpointer's (Note [Checkpoint layout]): <dir>/step-<N>/ with
  DCP's files (__<rank>_<i>.distcp, .metadata), one manifest a rank
  (rank-<r>.json: step, world, run, the rank's sampler state, and the size and
  SHA-256 of each file that rank wrote), and rank 0's COMPLETE once every
  rank's manifest is durable; LATEST and pruning as there. DCP writes its files
  in place and carries no checksum, so the manifests do: at load every rank
  verifies the files it wrote (read once, in parallel across ranks, hashlib
  releasing the GIL), the ranks agree on the newest step every rank can use
  (naming the file, rank and reason of a refusal and falling back to the
  previous one, as Checkpointer does), and only then DCP loads. Saving a step
  again removes its COMPLETE first (Note [Saving a step again]). DCP's
  collectives run on the default group (NCCL or Gloo), the agreements on the
  package's Gloo group (Note [The side group]). The ranks must be as many as
  at save: the sampler positions are per rank. DCP's loader is pickle-free
  (tensors and its own metadata), so weights_only does not apply.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core
from . import resume as _resume  # noqa: F401 (slurmddp.torch and resume set up first)
from ._checkpoint import (
    Resumed,
    _RunClaim,
    _agree_or_raise,
    _complete_marker,
    _complete_steps_in,
    _refusals,
    _sampler_state,
    _sampler_text,
    _start_save,
)
from ._collectives import _broadcast_steps, _cpu_group
from ._requeue import restart_count, run_id

__all__ = ["ShardedCheckpointer"]

_MANIFEST = "slurmddp-sharded v1"


def _dcp() -> Any:
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        dcp = None
    if dcp is None or not hasattr(dcp, "FileSystemWriter"):
        raise _core.InvalidArgument(
            f"ShardedCheckpointer: needs torch.distributed.checkpoint (torch >= 2.2); this is "
            f"torch {torch.__version__}: use slurmddp.Checkpointer(scope=\"every_rank\") for "
            f"per-rank state on it")
    return dcp


def _sha256(path: str) -> Tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(8 << 20)
            if not chunk:
                break
            size += len(chunk)
            digest.update(chunk)
    return size, digest.hexdigest()


def _written_by(sdir: str, rank: int) -> List[str]:
    """The files of DCP's FileSystemWriter that `rank` wrote (its shards; the
    metadata for rank 0, DCP's coordinator)."""
    names = sorted(n for n in os.listdir(sdir) if n.startswith(f"__{rank}_") and
                   n.endswith(".distcp"))
    if rank == 0 and os.path.exists(os.path.join(sdir, ".metadata")):
        names.append(".metadata")
    return names


class ShardedCheckpointer:
    """Sharded checkpoints for preemption and requeue (Note [Sharded checkpoints]).

    ``directory``, ``keep`` and ``per_job`` as for ``Checkpointer``.
    ``save(step, state, sampler=)`` and ``load_latest(state)`` are collective;
    ``state`` is a DCP state dict (tensors, DTensors, sharded tensors, nested
    dicts and plain values). ``load_latest`` loads into ``state`` in place and
    returns ``Resumed(step, state, sampler, path)``, or None when there is no
    checkpoint; a damaged or foreign checkpoint is refused naming file, rank
    and reason and the previous one is tried; when none is usable it raises
    ``slurmddp.Error``: never a silent fresh start. Needs torch >= 2.2.
    """

    def __init__(self, directory: str = "checkpoints", *, keep: int = 2, per_job: bool = True,
                 group: Optional[Any] = None) -> None:
        self._dcp = _dcp()
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise _core.InvalidArgument(
                f"ShardedCheckpointer: keep={keep!r}; expected an integer >= 1")
        if not directory:
            raise _core.InvalidArgument("ShardedCheckpointer: the directory is empty")
        self.base = directory
        self.dir = _core.job_checkpoint_dir(directory) if per_job else directory
        self.keep = keep
        self.per_job = per_job
        self.run_id = run_id()
        self.restart_count = restart_count()
        self._group_arg = group
        _core.make_private_dirs(self.dir)  # 0700 (Note [Planted files])
        self._claim = _RunClaim(self.dir, per_job)
        if group is None and dist.is_available() and dist.is_initialized():
            _cpu_group(None)  # Note [The side group]

    def _world(self) -> Tuple[int, int, Optional[Any]]:
        group = _cpu_group(self._group_arg)
        return dist.get_rank(group), dist.get_world_size(group), group

    def save(self, step: int, state: Dict[str, Any], *, sampler: Any = None) -> str:
        """Writes checkpoint ``step`` (collective). Returns its directory."""
        rank, world, group, sdir = _start_save("ShardedCheckpointer", self, step)
        error: Optional[Exception] = None
        sampler_text = ""
        try:
            sampler_text = _sampler_text(sampler)
        except _core.InvalidArgument as e:
            error = e
        _agree_or_raise(error, rank, world, group, f"ShardedCheckpointer.save: step {step}")
        self._dcp.save(state, storage_writer=self._dcp.FileSystemWriter(sdir))
        files = {}
        for name in _written_by(sdir, rank):
            size, sha = _sha256(os.path.join(sdir, name))
            files[name] = {"bytes": size, "sha256": sha}
        manifest = {"format": _MANIFEST, "step": step, "rank": rank, "world": world,
                    "run": self.run_id, "sampler": sampler_text, "files": files}
        _core.write_atomic(sdir, f"rank-{rank}.json", json.dumps(manifest, sort_keys=True) + "\n")
        dist.barrier(group=group)  # every rank's files and manifest are durable
        if rank == 0:
            _core.write_atomic(sdir, "COMPLETE",
                               f"complete step={step} world={world} scope=sharded "
                               f"run={self.run_id}{self._claim.marker()}\n")
            _core.write_atomic(self.dir, "LATEST", f"step-{step}\n")
            _core.prune_checkpoints(self.dir, step, self.keep)
        dist.barrier(group=group)
        return sdir

    def complete_steps(self) -> List[int]:
        """The steps of the complete checkpoints, newest first (local)."""
        return _complete_steps_in(self.dir)

    def _check(self, step: int, rank: int, world: int) -> str:
        """This rank's sampler state at `step`; raises _core.Error saying why
        the checkpoint cannot be used."""
        sdir = os.path.join(self.dir, f"step-{step}")
        try:
            with open(os.path.join(sdir, "COMPLETE"), encoding="utf-8", errors="replace") as f:
                marker = _complete_marker(f.read())
        except OSError as e:
            raise _core.Error(f"checkpoint {sdir}/COMPLETE is unreadable ({e.strerror}); the "
                              f"directory must be shared by every node") from None
        if marker.get("scope") != "sharded":
            raise _core.InvalidArgument(
                f"ShardedCheckpointer: {sdir} was saved by Checkpointer (scope="
                f"{marker.get('scope')!r}), not by ShardedCheckpointer")
        if marker.get("world") != str(world):
            raise _core.Error(f"checkpoint {sdir} was written by {marker.get('world')} ranks; "
                              f"this job has {world} (resuming needs the same number of ranks)")
        if self.per_job and marker.get("run") != self.run_id:
            raise _core.Error(f"checkpoint {sdir} belongs to run {marker.get('run')}, not to "
                              f"this run ({self.run_id}); per_job=False to continue another "
                              f"job's checkpoints")
        self._claim.check(marker, sdir)
        path = os.path.join(sdir, f"rank-{rank}.json")
        try:
            with open(path, encoding="utf-8") as f:
                manifest = json.load(f)
        except OSError as e:
            raise _core.Error(f"checkpoint {path} is missing or unreadable ({e.strerror})") \
                from None
        except ValueError as e:
            raise _core.Error(f"checkpoint {path} is damaged: {e}") from None
        got = (manifest.get("format"), manifest.get("step"), manifest.get("rank"),
               manifest.get("world"))
        if got != (_MANIFEST, step, rank, world):
            raise _core.Error(f"checkpoint {path} holds {got}; expected {(_MANIFEST, step, rank, world)}")
        for name, want in sorted(manifest.get("files", {}).items()):
            fpath = os.path.join(sdir, name)
            try:
                size, sha = _sha256(fpath)
            except OSError as e:
                raise _core.Error(f"checkpoint {fpath} is missing or unreadable "
                                  f"({e.strerror})") from None
            if size != want.get("bytes"):
                raise _core.Error(f"checkpoint {fpath} is damaged: {size} bytes, written with "
                                  f"{want.get('bytes')}")
            if sha != want.get("sha256"):
                raise _core.Error(f"checkpoint {fpath} is damaged: sha256 {sha[:16]}..., "
                                  f"written with {str(want.get('sha256'))[:16]}...")
        return str(manifest.get("sampler", ""))

    def load_latest(self, state: Dict[str, Any]) -> Optional[Resumed]:
        """Loads the newest usable checkpoint into ``state`` (collective; see the class)."""
        rank, world, group = self._world()
        self._claim.ensure(rank, world, group, "ShardedCheckpointer.load_latest")
        steps = _broadcast_steps(self.complete_steps() if rank == 0 else [], 0, group)
        refused: List[str] = []
        for step in steps:
            reason = ""
            sampler = ""
            try:
                sampler = self._check(step, rank, world)
            except _core.InvalidArgument:
                raise
            except _core.Error as e:
                reason = str(e)
            why = _refusals(reason, rank, world, group)
            sdir = os.path.join(self.dir, f"step-{step}")
            if not why:
                self._dcp.load(state, storage_reader=self._dcp.FileSystemReader(sdir))
                if refused and rank == 0:
                    print(f"slurmddp: resuming from {sdir}, the newest usable checkpoint",
                          file=sys.stderr, flush=True)
                return Resumed(step, state, _sampler_state(sampler), sdir)
            refused.append(f"step-{step} ({why})")
            if rank == 0:
                print(f"slurmddp: refusing checkpoint {sdir}: {why}; trying the previous one",
                      file=sys.stderr, flush=True)
        if refused:
            raise _core.Error(
                f"ShardedCheckpointer: no usable checkpoint in {self.dir}: {'; '.join(refused)}; "
                f"not starting from scratch (remove the directory to start a fresh run)")
        return None

