"""DistributedSampler and DataLoader with an exact resume (slurmddp.torch)."""
from __future__ import annotations

import itertools
import os
import sys
import warnings
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sized, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from . import _core


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
