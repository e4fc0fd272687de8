"""settle_ddp: DDP's first bucket layout spent before a resume (slurmddp.torch)."""
from __future__ import annotations

from typing import Any, Iterator

import torch

from . import _core


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
