"""Checkpointer: consistent checkpoints that a requeued job resumes from
(slurmddp.resume)."""
from __future__ import annotations

import io
import os
import pickletools
import re
import sys
import zipfile
from typing import IO, Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from . import _core
from ._collectives import _broadcast_steps, _cpu_group, _gather_texts, _keep
from ._requeue import restart_count, run_id


class Resumed(NamedTuple):
    """What ``Checkpointer.load_latest()`` returns."""
    step: int
    state: Any  # what save() was given (rank 0's, or this rank's with scope="every_rank")
    sampler: Optional[Dict[str, Any]]  # for DistributedSampler.load_state_dict, if saved
    path: str  # the checkpoint's directory


_SAMPLER_LINE = re.compile(r"slurmddp-sampler v1 epoch=(\d+) position=(\d+) ")
_SCOPES = ("rank0", "every_rank")


def _sampler_text(sampler: Any) -> str:
    if sampler is None:
        return ""
    state = sampler.state_dict() if hasattr(sampler, "state_dict") else sampler
    text = state.get("state") if isinstance(state, dict) else None
    if not isinstance(text, str):
        raise _core.InvalidArgument(
            f"Checkpointer.save: sampler={type(sampler).__name__} has no slurm-ddp sampler "
            f"state; pass slurmddp.torch.DistributedSampler or its state_dict(position=...) "
            f"(torch's own DistributedSampler cannot resume mid-epoch)")
    return text


def _sampler_state(text: str) -> Optional[Dict[str, Any]]:
    if not text:
        return None
    m = _SAMPLER_LINE.match(text)
    state: Dict[str, Any] = {"state": text}
    if m:
        state["epoch"], state["position"] = int(m.group(1)), int(m.group(2))
    return state


def _complete_marker(text: str) -> Dict[str, str]:
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def _complete_steps_in(directory: str) -> List[int]:
    steps = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        m = re.fullmatch(r"step-(\d+)", name)
        if m and os.path.exists(os.path.join(directory, name, "COMPLETE")):
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


# Note [Saving a step again]
#   Saving into a step directory that holds a complete checkpoint (a step
#   saved twice, a run restarted from an earlier step) replaces the rank files
#   one by one; with the old COMPLETE still there, a rank killed midway would
#   leave old and new files side by side, each with a good checksum, and the
#   mix would load. So rank 0 removes that COMPLETE (durably) before any rank
#   renames a file into place, every rank knows it is gone before renaming (the
#   agreement after serializing into its temporary file), and the step is
#   complete again only when every new file is.
#   And a fresh start is never silent: when this run has no checkpoint but its
#   per-job directory's siblings hold other jobs' (a job submitted again by
#   hand is a new job, hence a new run), rank 0 says so on stderr, naming them
#   and how to continue one, and starts from scratch: other runs beside this
#   one are also what a sweep looks like, so it is not an error.
def _unmark_complete(sdir: str) -> None:
    marker = os.path.join(sdir, "COMPLETE")
    try:
        os.unlink(marker)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _core.Error(f"Checkpointer.save: cannot remove {marker} before saving the step "
                          f"again: {e.strerror}") from None
    fd = os.open(sdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _agree_or_raise(error: Optional[Exception], rank: int, world: int, group: Optional[Any],
                    what: str) -> None:
    """Collective: raises on every rank when any rank has an error: this
    rank's own error on the ranks that have one, on the others slurmddp.Error
    naming the ranks and their errors."""
    reason = str(error) if error is not None else ""
    if error is not None and not reason:
        reason = type(error).__name__
    why = _refusals(reason, rank, world, group)
    if not why:
        return
    if error is not None:
        raise error
    raise _core.Error(f"{what} failed on another rank: {why}")


def _start_save(who: str, checkpointer: Any, step: int) -> Tuple[int, int, Optional[Any], str]:
    """The opening of Checkpointer.save and ShardedCheckpointer.save: `step`
    checked, the directory claimed (Note [Run identity]), step-<step> made and
    its old COMPLETE removed by rank 0 (Note [Saving a step again]). Returns
    (rank, world, group, step directory)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _core.InvalidArgument(f"{who}.save: step={step!r}; expected an integer >= 0")
    rank, world, group = checkpointer._world()
    checkpointer._claim.ensure(rank, world, group, f"{who}.save")
    sdir = os.path.join(checkpointer.dir, f"step-{step}")
    _core.make_private_dirs(sdir)
    if rank == 0:
        _unmark_complete(sdir)
    return rank, world, group, sdir


class _RunClaim:
    """Note [Run identity] (runtime/resume/run_record.h): rank 0 claims a
    per-job directory for this run, once, before the first save or load reads
    or changes it; a directory of another job with the same id stops every
    rank, saying whose it is."""

    def __init__(self, directory: str, per_job: bool) -> None:
        self.dir = directory
        self.nonce = ""  # rank 0's, once claimed
        self._done = not per_job

    def ensure(self, rank: int, world: int, group: Optional[Any], what: str) -> None:
        """Collective on the first call with a per-job directory."""
        if self._done:
            return
        error: Optional[Exception] = None
        if rank == 0:
            try:
                self.nonce = _core.claim_run(self.dir)
            except _core.Error as e:
                error = e
        _agree_or_raise(error, rank, world, group, what)
        self._done = True

    def marker(self) -> str:
        """The COMPLETE marker's field naming the run ("" without a claim)."""
        return f" nonce={self.nonce}" if self.nonce else ""

    def check(self, marker: Dict[str, str], sdir: str) -> None:
        """Raises _core.Error (on rank 0, which holds the nonce) when the
        checkpoint was completed by another run."""
        theirs = marker.get("nonce")
        if self.nonce and theirs not in (None, self.nonce):
            raise _core.Error(f"checkpoint {sdir} was completed by another run (nonce {theirs}) "
                              f"than the one {self.dir}/RUN records (nonce {self.nonce}): it is "
                              f"not this job's")


def _refusals(reason: str, rank: int, world: int, group: Optional[Any]) -> str:
    """Collective: "" when no rank has a reason, else the first ranks' reasons
    ("rank 1: ...; rank 3: ...; and 2 more ranks")."""
    first = torch.tensor([rank if reason else world], dtype=torch.int64)
    dist.all_reduce(first, op=dist.ReduceOp.MIN, group=group)
    _keep(first)
    if int(first.item()) == world:
        return ""
    reasons = _gather_texts(reason, world, group)
    failed = [(r, text) for r, text in enumerate(reasons) if text]
    why = "; ".join(f"rank {r}: {text}" for r, text in failed[:3])
    if len(failed) > 3:
        why += f"; and {len(failed) - 3} more ranks"
    return why


# Note [Loading what was saved]
#   A requeued job loads what its previous run saved, and a state that saved
#   fine must not fail only then, on every rank. The policy, the same on every
#   supported torch (1.13 to the newest): Checkpointer(weights_only=True), the
#   default, loads with torch.load(weights_only=True) (tensors, containers,
#   numbers, strings and what torch.serialization.add_safe_globals allows:
#   nobody who can write the directory can run code in the job), and save()
#   refuses, before writing anything, a state whose pickle names anything else
#   (numpy arrays, a custom class), naming it: torch's own list of what is
#   unsafe where it has one (2.6 and later), else the globals of the pickle
#   checked against the weights-only unpickler's allowed ones (1.13). Torch
#   1.13's own weights-only unpickler cannot read a float (BINFLOAT: every
#   optimizer's learning rate), and its torch.load ignores a pickle_module
#   unless weights_only is True; so there the pickle's globals are checked the
#   same way before loading (the opcodes that name a callable: GLOBAL and
#   INST, the others refused), and then it is loaded as a whole.
#   weights_only=False loads full pickle: for a directory only its owner can
#   write. CUDA tensors load onto this rank's device, not the saving rank's:
#   the current CUDA device when the process has initialized CUDA
#   (torch.cuda.set_device(LOCAL_RANK) does), else the CPU.
def _own_device_map() -> Dict[str, str]:
    target = "cpu"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        target = f"cuda:{torch.cuda.current_device()}"
    where = {f"cuda:{i}": target for i in range(256)}
    where["cuda"] = target
    return where


def _torch_load(payload: "_PayloadWindow", step: int, weights_only: bool, map_location: Any,
                args: Dict[str, Any]) -> Any:
    """torch.load of a checkpoint's payload under Note [Loading what was saved]."""
    if "weights_only" not in args and "pickle_module" not in args:
        if weights_only and int(torch.__version__.split(".")[0]) < 2:
            _check_loadable(payload, step, "torch.load")  # then its globals are safe
            args = dict(args, weights_only=False)
        else:
            args = dict(args, weights_only=weights_only)
    payload.seek(0)
    return torch.load(payload, map_location=map_location, **args)


def _pickle_globals(payload: IO[bytes]) -> List[str]:
    """The globals a torch.save archive's pickle names ("module.name")."""
    payload.seek(0)
    with zipfile.ZipFile(payload) as z:
        pickled = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pickled:
            return []
        data = z.read(pickled[0])
    names = []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            names.append(str(arg).replace(" ", "."))
        elif op.name in ("STACK_GLOBAL", "EXT1", "EXT2", "EXT4", "OBJ"):
            names.append(f"(a global by {op.name}, which is not checked)")
    return names


def _check_loadable(payload: IO[bytes], step: int, when: str = "save") -> None:
    find = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if find is not None:
        payload.seek(0)
        unsafe = sorted(set(find(payload)))
    else:
        from torch import _weights_only_unpickler
        allowed = set(_weights_only_unpickler._get_allowed_globals())
        unsafe = sorted({g for g in _pickle_globals(payload) if g not in allowed})
    if not unsafe:
        return
    shown = ", ".join(unsafe[:6]) + (f" and {len(unsafe) - 6} more" if len(unsafe) > 6 else "")
    if when != "save":
        raise _core.Error(
            f"checkpoint of step {step} holds {shown}, which weights_only=True does not load "
            f"(Checkpointer(..., weights_only=False) loads full pickle, for a directory only "
            f"you can write; Note [Loading what was saved])")
    raise _core.InvalidArgument(
        f"Checkpointer.save: the state of step {step} holds {shown}, which "
        f"torch.load(weights_only=True) refuses: the requeued job could not load it. Keep "
        f"tensors and plain Python values in the state (torch.from_numpy, .tolist(), a "
        f"class's state_dict()), allow the types with torch.serialization."
        f"add_safe_globals (torch >= 2.4, before save and load), or pass "
        f"Checkpointer(..., weights_only=False) for a directory only you can write "
        f"(Note [Loading what was saved])")


class _PayloadWindow(io.RawIOBase):
    """The payload of a checkpoint file as a read-only, seekable file of its
    own: bytes [offset, offset + size) of `file` (a _core.CheckpointFile or
    CheckpointWriter, kept open by this), read with os.preadv straight into the
    reader's buffer (Note [Streaming checkpoints]). What torch.load and
    zipfile read, without the payload ever being in memory as bytes. No
    fileno(): torch would read the descriptor from its own offset."""

    def __init__(self, file: Any, offset: int, size: int) -> None:
        super().__init__()
        self._file, self._fd = file, file.fileno()
        self._offset, self._size, self._pos = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = max(0, min(len(view), self._size - self._pos))
        done = 0
        while done < want:
            n = os.preadv(self._fd, [view[done:want]], self._offset + self._pos + done)
            if n == 0:
                raise _core.Error(
                    f"checkpoint {self._file.path} is damaged: it ended at "
                    f"{self._offset + self._pos + done} bytes while its payload was read; "
                    f"expected {self._offset + self._size}")
            done += n
        self._pos += done
        return done

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + pos < 0:
            raise ValueError(f"negative seek position {base + pos}")
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._file = None
        super().close()


class Checkpointer:
    """Checkpoints for preemption and requeue (Note [Checkpoint layout]).

    ``directory``/job-<id> (``job-<array job>_<task>`` in a job array; the same
    across requeues of one job, and another for every other job; ``per_job=False``:
    ``directory`` itself, e.g. for a chain of jobs). It must be on a file system
    every node sees.

    ``save(step, state, sampler=)`` is collective: ``state`` is anything
    ``torch.save`` takes (model, optimizer, scaler, LR scheduler state dicts,
    counters); with ``scope="rank0"`` (default) rank 0 writes it and every rank
    its sampler position, with ``scope="every_rank"`` each rank writes its own
    (a shard). Every file is written to a temporary name, fsynced and renamed,
    and carries a checksum; a checkpoint counts once every rank's file is
    durable (rank 0 then writes its COMPLETE marker). The ``keep`` newest are kept.

    ``load_latest()`` is collective: the newest checkpoint that every rank can
    read, or None when there is none. A damaged one (checksum, truncation), a
    foreign one (another job, another world size) or one a rank cannot see is
    refused with a message naming the file, rank and reason, and the previous one
    is tried; when none is usable it raises ``slurmddp.Error``: never a silent
    fresh start.

    ``weights_only`` (default True): the state is loaded with
    ``torch.load(weights_only=True)`` on every torch, and ``save()`` refuses a
    state that could not be loaded so, naming what it holds (Note [Loading
    what was saved]); False: full pickle, for a directory only you can write.
    Saving a step again cannot mix its old and new files; a fresh start while
    other jobs' checkpoints lie beside this one's is said on stderr (Note
    [Saving a step again]).

    ``run_id`` and ``restart_count`` name the run for loggers. ``group``: a
    Gloo group over every rank (default: the package's own, made here when
    torch.distributed is initialized: construct the Checkpointer on every
    rank, after init_process_group; Note [The side group]).
    """

    def __init__(self, directory: str = "checkpoints", *, keep: int = 2, scope: str = "rank0",
                 per_job: bool = True, weights_only: bool = True,
                 group: Optional[Any] = None) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise _core.InvalidArgument(f"Checkpointer: keep={keep!r}; expected an integer >= 1")
        if scope not in _SCOPES:
            raise _core.InvalidArgument(
                f"Checkpointer: scope={scope!r}; expected one of {', '.join(_SCOPES)}")
        if not directory:
            raise _core.InvalidArgument("Checkpointer: the directory is empty")
        if not isinstance(weights_only, bool):
            raise _core.InvalidArgument(
                f"Checkpointer: weights_only={weights_only!r}; expected True or False")
        self.base = directory
        self.dir = _core.job_checkpoint_dir(directory) if per_job else directory
        self.weights_only = weights_only
        self.keep = keep
        self.scope = scope
        self.per_job = per_job
        self.run_id = run_id()
        self.restart_count = restart_count()
        self._group_arg = group
        _core.make_private_dirs(self.dir)  # 0700 (Note [Planted files])
        self._claim = _RunClaim(self.dir, per_job)
        if group is None and dist.is_available() and dist.is_initialized():
            _cpu_group(None)  # Note [The side group]: now, while every rank is here

    def _world(self) -> Tuple[int, int, Optional[Any]]:
        group = _cpu_group(self._group_arg)
        return dist.get_rank(group), dist.get_world_size(group), group

    def save(self, step: int, state: Any, *, sampler: Any = None) -> str:
        """Writes checkpoint ``step`` (collective; see the class). Returns its directory."""
        rank, world, group, sdir = _start_save("Checkpointer", self, step)
        writer: Optional[_core.CheckpointWriter] = None
        error: Optional[Exception] = None
        try:
            try:
                # Note [Streaming checkpoints]: torch.save writes through the
                # checksum into a temporary file, renamed into place at commit()
                writer = _core.CheckpointWriter(sdir, f"rank-{rank}.ckpt", step, rank, world,
                                                _sampler_text(sampler))
                if self.scope == "every_rank" or rank == 0:
                    torch.save(state, writer)
                    if self.weights_only:
                        writer.flush()
                        with _PayloadWindow(writer, writer.payload_offset,
                                            writer.payload_bytes) as payload:
                            _check_loadable(payload, step)
            except _core.Error as e:  # a state torch could not load, a full disk
                error = e
            # every rank knows that every state was serialized and written, and
            # rank 0's COMPLETE of an earlier save of this step is gone
            _agree_or_raise(error, rank, world, group, f"Checkpointer.save: step {step}")
            assert writer is not None
            writer.commit()
        finally:
            if writer is not None:
                writer.abort()  # a no-op once committed
        dist.barrier(group=group)  # every rank's file is durable
        if rank == 0:
            _core.write_atomic(sdir, "COMPLETE",
                               f"complete step={step} world={world} scope={self.scope} "
                               f"run={self.run_id}{self._claim.marker()}\n")
            _core.write_atomic(self.dir, "LATEST", f"step-{step}\n")
            _core.prune_checkpoints(self.dir, step, self.keep)
        dist.barrier(group=group)  # nobody goes on before the checkpoint is complete
        return sdir

    def _tell_other_runs(self) -> None:
        """Note [Saving a step again]: a fresh start beside other runs' checkpoints is said."""
        others = []
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            return
        own = os.path.basename(os.path.normpath(self.dir))
        for name in names:
            if not name.startswith("job-") or name == own:
                continue
            steps = _complete_steps_in(os.path.join(self.base, name))
            if steps:
                others.append((name, steps[0]))
        if not others:
            return
        shown = ", ".join(f"{n} (step {st})" for n, st in others[:5])
        if len(others) > 5:
            shown += f" and {len(others) - 5} more"
        name = others[-1][0]
        print(f"slurmddp: starting from scratch: no checkpoint of this run ({self.run_id}) in "
              f"{self.dir}, while {self.base} holds checkpoints of other jobs: {shown}. A job "
              f"submitted again by hand is a new run; to continue one, pass its directory: "
              f"Checkpointer({os.path.join(self.base, name)!r}, per_job=False)",
              file=sys.stderr, flush=True)

    def complete_steps(self) -> List[int]:
        """The steps of the complete checkpoints in the directory, newest first
        (local: no communication)."""
        return _complete_steps_in(self.dir)

    def _read(self, step: int, rank: int, world: int) -> Tuple[str, "_PayloadWindow"]:
        """(sampler, payload) of this rank at `step`; raises _core.Error saying
        why the checkpoint cannot be used."""
        sdir = os.path.join(self.dir, f"step-{step}")
        marker_path = os.path.join(sdir, "COMPLETE")
        try:
            with open(marker_path, encoding="utf-8", errors="replace") as f:
                marker = _complete_marker(f.read())
        except OSError as e:
            raise _core.Error(f"checkpoint {marker_path} is unreadable ({e.strerror}); the "
                              f"directory must be shared by every node") from None
        if marker.get("world") not in (None, str(world)):
            raise _core.Error(f"checkpoint {sdir} was written by {marker['world']} ranks; this "
                              f"job has {world} (resuming needs the same number of ranks)")
        if self.per_job and marker.get("run") not in (None, self.run_id):
            raise _core.Error(f"checkpoint {sdir} belongs to run {marker['run']}, not to this "
                              f"run ({self.run_id}); per-job directories are not shared "
                              f"(per_job=False to continue another job's checkpoints)")
        self._claim.check(marker, sdir)
        if marker.get("scope") not in (None, self.scope):
            raise _core.InvalidArgument(
                f"Checkpointer: {sdir} was saved with scope={marker['scope']!r}, this "
                f"Checkpointer has scope={self.scope!r}")

        def rank_file(who: int, verify: bool) -> _core.CheckpointFile:
            path = os.path.join(sdir, f"rank-{who}.ckpt")
            f = _core.CheckpointFile(path, verify)
            if (f.step, f.rank, f.world) != (step, who, world):
                raise _core.Error(
                    f"checkpoint {path} holds step {f.step} of rank {f.rank} in a world of "
                    f"{f.world}; expected step {step} of rank {who} in a world of {world}")
            return f

        # Note [Streaming checkpoints]: each rank verifies its own file's
        # checksum; rank 0's payload, which every rank loads with rank-0 scope,
        # is verified by rank 0, and the others check its structure
        own = rank_file(rank, verify=True)
        source = own
        if self.scope == "rank0" and rank != 0:
            source = rank_file(0, verify=False)
        return own.sampler(), _PayloadWindow(source, source.payload_offset, source.payload_bytes)

    def load_latest(self, *, map_location: Any = None, **torch_load_args: Any) -> Optional[Resumed]:
        """The newest usable checkpoint on every rank, or None (collective; see
        the class). ``map_location`` and other keywords go to ``torch.load``;
        by default CUDA tensors load onto this rank's current CUDA device when
        the process uses CUDA (``torch.cuda.set_device``), else onto the CPU,
        and ``weights_only`` is the Checkpointer's (Note [Loading what was
        saved])."""
        rank, world, group = self._world()
        self._claim.ensure(rank, world, group, "Checkpointer.load_latest")
        if map_location is None:
            map_location = _own_device_map()
        # the group spans every rank, so its rank 0 is the global one
        steps = _broadcast_steps(self.complete_steps() if rank == 0 else [], 0, group)
        if not steps and rank == 0 and self.per_job:
            self._tell_other_runs()
        refused: List[str] = []
        for step in steps:
            reason = ""
            try:
                sampler, payload = self._read(step, rank, world)
            except _core.InvalidArgument:
                raise
            except _core.Error as e:
                reason = str(e)
            except Exception as e:  # noqa: BLE001 (MemoryError, OSError: agreed, not a hang)
                reason = f"checkpoint: rank {rank} failed to read {self.dir}/step-{step}: " \
                         f"{type(e).__name__}: {e}"
            why = _refusals(reason, rank, world, group)
            if not why:
                with payload:
                    state = _torch_load(payload, step, self.weights_only, map_location,
                                        torch_load_args)
                if refused and rank == 0:
                    print(f"slurmddp: resuming from {self.dir}/step-{step}, the newest usable "
                          f"checkpoint", file=sys.stderr, flush=True)
                return Resumed(step, state, _sampler_state(sampler),
                               os.path.join(self.dir, f"step-{step}"))
            refused.append(f"step-{step} ({why})")
            if rank == 0:
                print(f"slurmddp: refusing checkpoint {self.dir}/step-{step}: {why}; trying the "
                      f"previous one", file=sys.stderr, flush=True)
        if refused:
            raise _core.Error(
                f"Checkpointer: no usable checkpoint in {self.dir}: {'; '.join(refused)}; not "
                f"starting from scratch (remove the directory to start a fresh run)")
        return None
