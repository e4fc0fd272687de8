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
from __future__ import annotations

import atexit
import functools
import itertools
import linecache
import os
import sys
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Dict, Iterator, List, Optional, Sized, Tuple, Union
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from . import _core

__all__ = ["DataLoader", "DistributedSampler", "Progress", "Store", "SCHEME", "settle_ddp"]

SCHEME = "slurmddp"


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


def _warn_if_the_master_changed() -> None:
    """Note [A master changed after the plugin] (runtime/env/identity.cpp), for
    env:// too: torch reads MASTER_ADDR/MASTER_PORT as they are."""
    exported = os.environ.get("SLURMDDP_MASTER")
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not exported or addr is None or port is None or f"{addr}:{port}" == exported:
        return
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # once a node
    warnings.warn(
        f"slurmddp: MASTER_ADDR:MASTER_PORT={addr}:{port} differs from {exported}, which "
        f"slurm-ddp's plugin exported for step {os.environ.get('SLURMDDP_STEP', '?')}: set after "
        f"the plugin ran (a container image's preset, or pyxis with enroot's PyTorch hook loaded "
        f"after the plugin). init_method=\"slurmddp://\" uses {exported}; env:// uses "
        f"{addr}:{port}, which enroot's hook gives every step of a job. Fix: load slurm-ddp's "
        f"plugstack line after pyxis's, or srun --container-env=MASTER_ADDR,MASTER_PORT",
        RuntimeWarning, stacklevel=3)


_warn_if_the_master_changed()
# torch.distributed's default process group timeout (30 minutes).
_DEFAULT_TIMEOUT = timedelta(minutes=30)


class Store(dist.Store):
    """A ``torch.distributed.Store`` backed by slurm-ddp's store.

    What ``init_method="slurmddp://"`` hands to torch; usable directly, e.g.
    ``dist.init_process_group("gloo", store=Store(slurmddp.connect(...)),
    rank=r, world_size=n)``. Blocking calls use the store's ``timeout``
    (``set_timeout``) unless given one and raise ``slurmddp.TimeoutError``
    naming the missing keys.
    """

    def __init__(self, store: _core.Store, timeout: timedelta = _DEFAULT_TIMEOUT) -> None:
        super().__init__()
        self._store = store
        self._rendezvous: Optional[_core.Rendezvous] = None
        self.set_timeout(timeout)

    @property
    def endpoint(self) -> str:
        """host:port of the server."""
        return self._store.endpoint

    def _ms(self, timeout: Optional[timedelta] = None) -> int:
        t = self.timeout if timeout is None else timeout
        return max(0, int(t.total_seconds() * 1000))

    def set(self, key: str, value: Union[bytes, str]) -> None:
        self._store.set(key, value)

    def get(self, key: str) -> bytes:
        return self._store.get(key, self._ms())

    def add(self, key: str, value: int) -> int:
        return self._store.add(key, value)

    def compare_set(self, key: str, expected_value: Union[bytes, str],
                    desired_value: Union[bytes, str]) -> bytes:
        return self._store.compare_set(key, expected_value, desired_value)

    def wait(self, keys: List[str], timeout: Optional[timedelta] = None) -> None:
        self._store.wait(list(keys), self._ms(timeout))

    def check(self, keys: List[str]) -> bool:
        return self._store.check(list(keys))

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(key)

    def num_keys(self) -> int:
        raise _core.Error("slurmddp.torch.Store: num_keys() is not supported by slurm-ddp's store")


# Stores handed to torch stay alive as long as the process: torch keeps only
# its C++ half, and the rank that hosts the server must keep serving the
# others until they are done (it lingers at exit until they disconnect).
_live_stores: List[Store] = []


def _query_int(query: Dict[str, List[str]], name: str) -> Optional[int]:
    """The URL's rank= or world_size=; None when absent or negative (torch's -1,
    "not given")."""
    values = query.get(name)
    if not values:
        return None
    try:
        value = int(values[-1])
    except ValueError:
        raise _core.InvalidArgument(
            f"slurmddp:// rendezvous: {name}={values[-1]!r} in the init_method URL is not an "
            f"integer") from None
    return value if value >= 0 else None


def _rendezvous_handler(url: str, timeout: timedelta = _DEFAULT_TIMEOUT,
                        **kwargs: Any) -> Iterator[Tuple[Store, int, int]]:
    query = parse_qs(urlparse(url).query)
    r = _core.rendezvous(_query_int(query, "rank"), _query_int(query, "world_size"),
                         max(0, int(timeout.total_seconds() * 1000)))
    store = Store(r.store, timeout)
    store._rendezvous = r  # for Progress: rank, world size, node
    _live_stores.append(store)
    yield (store, r.rank, r.world_size)
    raise RuntimeError("slurmddp:// rendezvous: a process group cannot re-rendezvous on the "
                       "same store; call init_process_group again")


def _register() -> None:
    try:
        dist.register_rendezvous_handler(SCHEME, _rendezvous_handler)
    except RuntimeError:
        pass  # already registered (the module was reloaded)


if dist.is_available():
    _register()


def _from_environment(name: str, var: str) -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() if name == "rank" else dist.get_world_size()
    value = os.environ.get(var)
    if value is None:
        raise _core.InvalidArgument(
            f"DistributedSampler: {name} was not given, torch.distributed is not initialized and "
            f"{var} is not set; pass {name}= or call init_process_group first")
    try:
        return int(value)
    except ValueError:
        raise _core.InvalidArgument(
            f"DistributedSampler: {var}={value!r} is not an integer") from None


class DistributedSampler(_TorchDistributedSampler):
    """A drop-in for ``torch.utils.data.DistributedSampler`` (and a subclass of
    it, so that code which checks for torch's sampler, e.g. to call
    ``set_epoch``, finds it).

    Same constructor, ``set_epoch`` and attributes (``num_replicas``, ``rank``,
    ``epoch``, ``num_samples``, ``total_size``, ``shuffle``, ``seed``,
    ``drop_last``), backed by slurm-ddp's C++ sampler:

    * ``mode="torch"`` yields exactly the installed torch's indices (torch
      2.6 shuffles differently from 214,748,364 samples on, and the sampler
      follows the release it runs with; proven against torch 1.13 and 2.6 for
      datasets up to 2**21 samples and at 2**24, and at 214,748,370 in full); ``mode="scalable"`` a keyed permutation in O(1) memory at any
      size (a different order); ``"auto"`` (default) is ``"torch"`` up to
      2**24 samples and ``"scalable"`` above, where torch's list of every
      index costs gigabytes per rank.
    * ``evaluation=True``: no padding; every sample exactly once across ranks
      (ranks differ in length by at most one; ``shard_sizes()`` weights
      per-rank metrics).
    * ``state_dict()``/``load_state_dict()``: mid-epoch resume. The next
      iteration of the saved epoch continues after the last sample the
      training was given: iterated by a ``DataLoader`` (any ``num_workers``,
      ``prefetch_factor``, ``persistent_workers``), the batches it yielded,
      not the indices its workers prefetched (Note [What the training
      consumed]); iterated directly, the indices handed out; or after
      ``position`` samples given to ``state_dict``.
    * Indices are made in C++ in blocks of ``block_size`` and handed to
      Python as lists, so iterating costs what iterating a list costs.

    ``num_replicas``/``rank`` default to the initialized process group, else
    to ``WORLD_SIZE``/``RANK`` (which slurm-ddp's plugin exports).

    It pickles (configuration, epoch and position; not the dataset's indices):
    a copy in another process continues where this one stands.
    """

    def __init__(self, dataset: Union[Sized, int], num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, *, mode: str = "auto", evaluation: bool = False,
                 block_size: int = 65536) -> None:
        if num_replicas is None:
            num_replicas = _from_environment("num_replicas", "WORLD_SIZE")
        if rank is None:
            rank = _from_environment("rank", "RANK")
        if num_replicas <= 0 or rank < 0 or rank >= num_replicas:
            raise _core.InvalidArgument(
                f"DistributedSampler: invalid rank {rank}, rank should be in the interval "
                f"[0, {num_replicas - 1}] (num_replicas={num_replicas})")
        if block_size <= 0:
            raise _core.InvalidArgument(
                f"DistributedSampler: block_size={block_size}; expected a positive count")
        # torch's __init__ is not called: it needs an initialized process
        # group; the same attributes are set here.
        self.dataset = dataset
        n = dataset if isinstance(dataset, int) else len(dataset)
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.evaluation = evaluation
        self.block_size = block_size
        self._config = dict(n=n, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                            seed=seed, drop_last=drop_last, evaluation=evaluation, mode=mode,
                            torch_version=torch.__version__)
        self._sampler = self._make_core()
        self.num_samples = len(self._sampler)
        self.total_size = self._sampler.total_size
        self.mode = self._sampler.mode
        self._resume: Optional[Tuple[int, int]] = None  # (epoch, position)
        self._block: Optional[Tuple[int, int, Iterator[int]]] = None  # (start, length, iterator)
        self._loader: Optional[_LoaderView] = None  # Note [What the training consumed]

    def _make_core(self) -> _core.Sampler:
        c = dict(self._config)
        return _core.Sampler(c.pop("n"), c.pop("num_replicas"), c.pop("rank"), **c)

    def __getstate__(self) -> Dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_sampler", "_block", "_loader")}
        state["_resume"] = (self.epoch, self.state_dict()["position"])
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._block = None
        self._loader = None
        self._sampler = self._make_core()

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Selects the permutation of ``epoch``; call it before each epoch's iteration."""
        self.epoch = epoch

    def shard_sizes(self) -> List[int]:
        """Samples per epoch of every rank (they sum to the dataset size with evaluation=True)."""
        return self._sampler.shard_sizes()

    def _blocks(self) -> Iterator[Iterator[int]]:
        s = self._sampler
        while True:
            start = s.position
            block = s.take_list(self.block_size)
            if not block:
                self._block = None
                return
            it = iter(block)
            self._block = (start, len(block), it)
            yield it

    def __iter__(self) -> Iterator[int]:
        s = self._sampler
        s.set_epoch(self.epoch)  # rewinds; shuffles only when the epoch changed
        if self._resume is not None:
            epoch, position = self._resume
            self._resume = None
            if epoch == self.epoch:
                s.seek(position)
        self._loader = _LoaderView.of_caller(self, s.position)
        return itertools.chain.from_iterable(self._blocks())

    def _position(self) -> int:
        if self._block is None:
            handed = self._sampler.position
        else:
            start, length, it = self._block
            handed = start + length - it.__length_hint__()
        if self._loader is not None:
            consumed = self._loader.consumed(handed)
            if consumed is not None:
                return min(consumed, handed)
        return handed

    def state_dict(self, position: Optional[int] = None) -> Dict[str, Any]:
        """Where this rank stands in the current epoch: ``{"epoch", "position", "state"}``.

        ``position``: the samples of this epoch the training has consumed, when
        that differs from what the sampler handed out (DataLoader workers
        prefetch ahead); default: the indices handed out so far.
        """
        s = self._sampler
        if self._resume is not None and self._resume[0] == self.epoch and self._block is None:
            at = self._resume[1]  # loaded, not iterated yet
        elif s.epoch == self.epoch:
            at = self._position()
        else:
            at = 0  # set_epoch() was called, the epoch has not started
        if position is not None:
            if position < 0 or position > self.num_samples:
                raise _core.InvalidArgument(
                    f"DistributedSampler.state_dict: position={position} is outside "
                    f"[0, {self.num_samples}]")
            at = position
        return {"epoch": self.epoch, "position": at, "state": self._state_line(self.epoch, at)}

    def _state_line(self, epoch: int, position: int) -> str:
        """The C++ state line: it carries the configuration's fingerprint."""
        return f"slurmddp-sampler v1 epoch={epoch} position={position} fingerprint=" \
               f"{self._sampler.fingerprint:016x}"

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state_dict()`` of a sampler with the same configuration.

        Sets ``epoch``; the next iteration of that epoch starts at the saved
        position (``set_epoch`` to another epoch starts that one from its
        beginning). Raises ``slurmddp.InvalidArgument`` when the state belongs
        to another configuration (dataset size, replicas, rank, seed, ...).
        """
        text = state.get("state") if isinstance(state, dict) else None
        if not isinstance(text, str):
            raise _core.InvalidArgument(
                f"DistributedSampler.load_state_dict: expected a dict from state_dict() with a "
                f"'state' entry, got {state!r:.200}")
        self._sampler.load_state(text)  # checks the fingerprint and the position
        self.epoch = self._sampler.epoch
        self._resume = (self.epoch, self._sampler.position)
        self._block = None
        self._loader = None


class DataLoader(torch.utils.data.DataLoader):
    """torch's ``DataLoader`` (the same arguments) over this package's
    ``DistributedSampler``, with ``state_dict()``/``load_state_dict()``: a
    loader that resumes mid-epoch after the last batch it yielded, for
    trainers that save and restore resumable loaders (PyTorch Lightning
    >= 2.3 does, in its checkpoints' loop state; Note [What the training
    consumed]).

    Without ``sampler``/``batch_sampler`` it makes the sampler that a
    trainer would put in, ``DistributedSampler(dataset, shuffle=shuffle,
    seed=seed)``: ``seed`` defaults to ``PL_GLOBAL_SEED`` (Lightning's
    ``seed_everything``), else 0, as Lightning's own sampler's; ranks from
    the process group, else ``RANK``/``WORLD_SIZE``. A ``sampler`` given
    must be this package's ``DistributedSampler``.
    """

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None, sampler: Any = None, *args: Any,
                 seed: Optional[int] = None, **kwargs: Any) -> None:
        if sampler is None and kwargs.get("batch_sampler") is None and not args:
            if seed is None:
                seed = int(os.environ.get("PL_GLOBAL_SEED", "0") or 0)
            alone = not (dist.is_available() and dist.is_initialized()) and \
                "WORLD_SIZE" not in os.environ
            # one process on its own: a shard of one (checked at iteration)
            sampler = DistributedSampler(dataset, shuffle=bool(shuffle), seed=seed,
                                         **({"num_replicas": 1, "rank": 0} if alone else {}))
            shuffle = None
        elif shuffle is not None and sampler is not None:
            raise _core.InvalidArgument(
                "slurmddp.torch.DataLoader: shuffle= and sampler= together; the sampler "
                "shuffles (DistributedSampler(shuffle=))")
        if not isinstance(sampler, DistributedSampler):
            raise _core.InvalidArgument(
                f"slurmddp.torch.DataLoader: sampler={type(sampler).__name__}; expected "
                f"slurmddp.torch.DistributedSampler (or none: it makes one)")
        super().__init__(dataset, batch_size, shuffle, sampler, *args, **kwargs)

    def __iter__(self) -> Any:
        if dist.is_available() and dist.is_initialized() and \
                self.sampler.num_replicas != dist.get_world_size():
            raise _core.InvalidArgument(
                f"slurmddp.torch.DataLoader: its sampler has num_replicas="
                f"{self.sampler.num_replicas} (rank {self.sampler.rank}) and the process group "
                f"has {dist.get_world_size()} ranks: the loader was made before the ranks "
                f"existed (make it after init_process_group, or in a LightningModule's "
                f"train_dataloader())")
        return super().__iter__()

    # Note [A loader's state on every rank]
    #   A trainer saves rank 0's loader state and loads it on every rank
    #   (Lightning keeps it in the loop state of rank 0's checkpoint). Under
    #   DDP every rank has consumed the same number of batches of its own
    #   shard, so the state is the epoch and the position in samples, with the
    #   sampler's configuration less its rank: a loader with another dataset
    #   size, seed or world size is refused by name, and each rank continues
    #   its own shard at that position.
    _KEY = "slurmddp.torch.DataLoader"

    def _shared_config(self) -> Dict[str, Any]:
        return {k: v for k, v in self.sampler._config.items() if k not in ("rank", "torch_version")}

    def state_dict(self) -> Dict[str, Any]:
        """The epoch and the samples of it consumed: the batches this loader
        yielded (Note [A loader's state on every rank])."""
        s = self.sampler.state_dict()
        return {self._KEY: 1, "epoch": s["epoch"], "position": s["position"],
                "config": self._shared_config()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next iteration of the saved epoch starts after the saved batches."""
        if not isinstance(state, dict) or state.get(self._KEY) != 1:
            raise _core.InvalidArgument(
                f"slurmddp.torch.DataLoader.load_state_dict: expected a dict from state_dict(), "
                f"got {state!r:.200}")
        mine = self._shared_config()
        saved = state.get("config", {})
        differ = [f"{k}={saved.get(k)!r} (here {v!r})" for k, v in mine.items() if saved.get(k) != v]
        if differ:
            raise _core.InvalidArgument(
                f"slurmddp.torch.DataLoader.load_state_dict: the state was saved by a loader "
                f"whose sampler had {', '.join(differ)}; rank {self.sampler.rank}")
        self.sampler.load_state_dict(
            {"state": self.sampler._state_line(int(state["epoch"]), int(state["position"]))})


# Note [What the training consumed]
#   A DataLoader with workers takes indices from its sampler ahead of the
#   training: prefetch_factor x num_workers batches are in the workers' queues
#   when a batch reaches the loop. A sampler that saves the indices it handed
#   out would skip those batches after a resume (up to 4 a rank at the
#   defaults, every preemption). The training consumed what the loader
#   yielded, and only the loader's iterator knows that: torch's
#   _BaseDataLoaderIter counts the batches it yielded (_num_yielded, since
#   torch 1.x) and draws its indices from the sampler through a BatchSampler
#   of its batch_size (or, with batch_size=None, one sample an item). So when
#   the sampler's iteration starts, it looks for the loader iterator among its
#   callers (DataLoader's own frames, two to five up, the same from torch 1.13
#   to 2.15) and keeps a weak reference; its position is then where the
#   iteration started plus the samples of the batches yielded, never more
#   than it handed out (a partial last batch). A loader it does not recognise
#   (a custom batch_sampler, another framework's loader) leaves the count of
#   indices handed out, as before, and says so once; state_dict(position=)
#   overrides both.
class _LoaderView:
    """The batches a DataLoader iterator yielded, as samples of this sampler."""

    _warned = False

    def __init__(self, iterator: Any, start: int, per_batch: int) -> None:
        self._iterator = weakref.ref(iterator)
        self._start = start
        self._per_batch = per_batch
        self._workers = getattr(iterator, "_num_workers", 0)
        self._told = False

    @classmethod
    def of_caller(cls, sampler: Any, start: int) -> Optional["_LoaderView"]:
        from torch.utils.data.dataloader import _BaseDataLoaderIter
        frame = sys._getframe(2)  # past __iter__ and of_caller
        for _ in range(5):
            if frame is None:
                return None
            iterator = frame.f_locals.get("self")
            if isinstance(iterator, _BaseDataLoaderIter):
                break
            frame = frame.f_back
        else:
            return None
        index_sampler = getattr(iterator, "_index_sampler", None)
        if index_sampler is sampler:
            per_batch = 1  # batch_size=None: one sample an item
        elif getattr(index_sampler, "sampler", None) is sampler and \
                isinstance(getattr(index_sampler, "batch_size", None), int):
            per_batch = index_sampler.batch_size
        else:
            if getattr(iterator, "_num_workers", 0) > 0 and not cls._warned:
                cls._warned = True
                warnings.warn(
                    f"slurmddp: DistributedSampler is iterated by a DataLoader through "
                    f"{type(index_sampler).__name__}, whose batches it cannot count; its "
                    f"state_dict() counts the indices handed out, which includes what the "
                    f"workers prefetched: pass state_dict(position=<samples trained on>) for "
                    f"an exact resume", stacklevel=4)
            return None
        if not isinstance(getattr(iterator, "_num_yielded", None), int):
            return None
        return cls(iterator, start, per_batch)

    def consumed(self, handed: int) -> Optional[int]:
        iterator = self._iterator()
        if iterator is not None:
            return self._start + iterator._num_yielded * self._per_batch
        # The iteration was dropped before the end of the epoch (a break out
        # of the loop): what its workers had prefetched is no longer known.
        if self._workers > 0 and not self._told:
            self._told = True
            warnings.warn(
                f"slurmddp: DistributedSampler.state_dict(): the DataLoader iteration that drew "
                f"from this sampler was dropped mid-epoch (a break out of the loop?); the "
                f"position counts the {handed} indices handed out, including batches its "
                f"{self._workers} workers had prefetched: save inside the loop, or pass "
                f"state_dict(position=<samples trained on>)", stacklevel=4)
        return None


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def settle_ddp(model: torch.nn.parallel.DistributedDataParallel, *inputs: Any,
               **kwargs: Any) -> None:
    """Runs DDP's first iteration on a throwaway input, for an exact resume.

    Collective (every rank calls it). A new ``DistributedDataParallel`` reduces
    its first iteration's gradients in one bucket in parameter order and then
    rebuilds its buckets in the order the gradients became ready (two
    iterations with ``static_graph=True``). A job that resumes from a
    checkpoint builds a new DDP, so its first step after the resume would sum
    the gradients in another layout than the uninterrupted run did at that
    step: the collective's chunks differ, and the result differs in the last
    bit. Called after constructing DDP and *before* loading the checkpoint's
    state dicts, this spends that first layout on ``model(*inputs, **kwargs)``
    (any input of the right shape, e.g. zeros for one sample; the outputs'
    sum is back-propagated), then clears the gradients: the resumed run is
    bit-identical to one that was never interrupted. The random number
    generators are restored (dropout); buffers the forward changes (batch norm
    statistics) are overwritten by the state dict loaded afterwards. No
    optimizer step is taken.
    """
    _settle(model, lambda: model(*inputs, **kwargs))


def _settle(model: torch.nn.parallel.DistributedDataParallel, forward: Any) -> None:
    """settle_ddp with `forward()` as DDP's forward (slurmddp.lightning's goes
    through the Trainer's strategy)."""
    rounds = 2 if getattr(model, "static_graph", False) else 1
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and \
        torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        for _ in range(rounds):
            outputs = [t for t in _tensors(forward()) if t.requires_grad]
            if not outputs:
                raise _core.InvalidArgument(
                    "settle_ddp: the model's output holds no tensor that requires a gradient; "
                    "pass inputs for a training forward")
            torch.stack([t.sum() for t in outputs]).sum().backward()
    model.zero_grad(set_to_none=True)


# Where a rank is, from its Python stacks (Note [Progress records]).

# Files that are not the user's: the interpreter's library, installed
# packages (torch among them) and this package.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_NOT_USER = tuple({os.path.dirname(os.__file__), os.path.dirname(torch.__file__), _PACKAGE_DIR})
_C10D_FILES = ("distributed_c10d.py", "c10d_logger.py")


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    if "/site-packages/" in filename or "/dist-packages/" in filename:
        return False
    return not os.path.abspath(filename).startswith(_NOT_USER)


def _line(filename: str, lineno: int) -> str:
    source = linecache.getline(filename, lineno).strip()
    code, _, _ = source.partition(" #")  # a trailing comment (a "#" in a string is rare here)
    if code.count('"') % 2 == 0 and code.count("'") % 2 == 0:
        source = code.rstrip()
    if len(source) > 60:
        source = source[:57] + "..."
    where = f"{os.path.basename(filename)}:{lineno}"
    return f"{where} ({source})" if source else where


def _locate(frame: Any) -> Tuple[str, str]:
    """(where, op) of a thread: its innermost line of user code, and the
    torch.distributed collective it is in (\"all_reduce\"), if any."""
    where, op = "", ""
    f = frame
    while f is not None:
        code = f.f_code
        name = os.path.basename(code.co_filename)
        if not op and name == "distributed_c10d.py" and not code.co_name.startswith("_"):
            op = code.co_name
        if not where and _is_user_file(code.co_filename):
            where = _line(code.co_filename, f.f_lineno)
            break
        f = f.f_back
    if not where and frame is not None:
        where = _line(frame.f_code.co_filename, frame.f_lineno)
    return where, op


def _stacks(skip: int) -> str:
    """Every thread's stack but `skip`'s, innermost call first, as faulthandler prints them."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out: List[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        out.append(f"Thread {ident:#x} ({names.get(ident, '?')}), most recent call first:")
        f = frame
        while f is not None:
            out.append(f'  File "{f.f_code.co_filename}", line {f.f_lineno} in {f.f_code.co_name}')
            f = f.f_back
    return "\n".join(out)


def _describe(full: bool) -> Tuple[str, str, str]:
    main = sys._current_frames().get(threading.main_thread().ident)
    where, op = _locate(main)
    return where, op, _stacks(threading.get_ident()) if full else ""


_live_progress: "weakref.WeakSet[Progress]" = weakref.WeakSet()


@atexit.register
def _close_all_progress() -> None:
    for p in list(_live_progress):
        p.close()


class Progress:
    """The hang report for a PyTorch job (Note [Progress records]).

    ::

        dist.init_process_group("nccl", init_method="slurmddp://")
        progress = slurmddp.torch.Progress()
        for step, batch in enumerate(loader):
            ...
            progress.step_done(step)

    ``step_done`` costs one atomic store (no store traffic). A watchdog
    thread polls the step's store every few seconds (at most every 5 s); when
    this rank's step has not ended for ``hang_after`` (``SLURMDDP_HANG_AFTER``
    when set; default half the group's timeout, at most 5 minutes; 0: never),
    or the report signal reached the process (``SLURMDDP_REPORT_SIGNAL``,
    default SIGURG: ``scancel --signal=URG <job>``; "none": off), every rank
    answers with where its main thread is (its innermost line of your code,
    and the torch.distributed collective it is in) and all its threads'
    stacks; one rank logs a single report, then the stacks of the ranks that
    are elsewhere. A rank that cannot answer (stopped, or holding the GIL) is
    named from its last heartbeat. Works with torch's NCCL and Gloo groups:
    it uses only slurm-ddp's store.

    The straggler report (Note [Straggler windows]): every
    ``straggler_every`` steps (``SLURMDDP_STRAGGLER_EVERY``; default 0: off)
    rank 0 names the ranks whose own time is over ``SLURMDDP_STRAGGLER_RATIO``
    (1.5) times the median, e.g. "straggler report, steps 100-199: rank 5 on
    n2: 4.0x the median (data 120 vs 30 ms a step) for 100 steps; the others
    wait for it". slurm-ddp does not see torch's collectives: iterate through
    ``progress.loader(loader)`` to time the data, and wrap explicit waits in
    ``with progress.waiting("all_reduce"):`` to tell compute from waiting.

    ``store``: the ``slurmddp://`` rendezvous's store (default: the one
    ``init_process_group`` used in this process). ``hang_after`` and
    ``straggler_every`` override the variables.
    """

    def __init__(self, store: Optional[Store] = None, *,
                 hang_after: Optional[timedelta] = None,
                 straggler_every: Optional[int] = None) -> None:
        if store is None:
            if not _live_stores:
                raise _core.InvalidArgument(
                    "Progress: no slurmddp:// rendezvous in this process; call "
                    "init_process_group(..., init_method=\"slurmddp://\") first, or pass store=")
            store = _live_stores[-1]
        r = store._rendezvous
        if r is None:
            raise _core.InvalidArgument(
                "Progress: the store did not come from the slurmddp:// rendezvous (it carries no "
                "rank, world size or node); use init_method=\"slurmddp://\"")
        timeout_ms = max(1, int(store.timeout.total_seconds() * 1000))
        hang_after_ms = None if hang_after is None else int(hang_after.total_seconds() * 1000)
        self._watch = _core.Watch(store._store, r.rank, r.world_size, r.node, "slurmddp/torch",
                                  timeout_ms, _describe, hang_after_ms, straggler_every)
        self.rank = r.rank
        self.world_size = r.world_size
        _live_progress.add(self)

    def step_done(self, step: int) -> None:
        """This rank completed training step ``step``."""
        self._watch.step_done(step)

    def loader(self, iterable: Any) -> Iterator[Any]:
        """Yields ``iterable``'s items, timing the wait for each as data time."""
        it = iter(iterable)
        watch = self._watch
        while True:
            watch.data_enter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                watch.data_leave()
            yield item

    @contextmanager
    def waiting(self, op: str) -> Iterator[None]:
        """Marks a wait in collective ``op`` (e.g. around ``dist.all_reduce``)."""
        self._watch.enter(op)
        try:
            yield
        finally:
            self._watch.leave()

    def report(self) -> None:
        """Asks for a report now, as the report signal does."""
        self._watch.request()

    @property
    def reports_printed(self) -> int:
        """Reports this rank printed (it prints those it asked for)."""
        return self._watch.printed

    def close(self) -> None:
        """Stops the watchdog; also done at exit."""
        self._watch.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
