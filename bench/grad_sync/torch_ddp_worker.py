#!/usr/bin/python3
"""One rank of torch DistributedDataParallel (CPU, gloo) for bench/grad_sync.

Started by grad_sync_bench beside its own ranks and driven through stdin, one
command per line, so that torch and slurm-ddp run the same experiments
interleaved in one run:

  setup <layout file> <compute seconds> <views 0|1>
      a model with one 1-D parameter per line of the file (element counts, in
      registration order) and the simulated backward of grad_sync_bench.cpp
      (Note [Simulated backward]): parameter i, last first, is done at
      compute seconds * (counts of the parameters after it, itself included) /
      total after backward began, then its gradient is written; a plain copy,
      a DDP copy (default options: 25 MiB buckets, gradients copied into
      buckets) and, with views 1, a DDP copy with gradient_as_bucket_view
  run <experiment>    one timed repetition; experiments:
      flat                       one all_reduce of a tensor as large as all
                                 parameters
      <mode>, ddp_<mode>, ddpv_<mode>
                                 backward of the plain copy, of DDP, of DDP
                                 with views; <mode> is busy (the CPU computes
                                 until each parameter's time), work (a fixed
                                 amount of matmuls per parameter, calibrated
                                 on an idle core) or idle (sleeps until then)
  quit

Every reply is one line: "ok <seconds> <cpu seconds>" (rank 0's wall time
and its process's CPU time; every rank starts after a barrier) or
"error <message>".

  torch_ddp_worker.py <rank> <world size> <master port>
"""

import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)

_A = torch.rand(48, 48)
_B = torch.rand(48, 48)
_C = torch.empty(48, 48)


def calibrate():
    """Small matmuls per second on this core, now (averaged over the ranks)."""
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 0.3:
        for _ in range(64):
            torch.mm(_A, _B, out=_C)
        n += 64
    rate = torch.tensor([n / (time.perf_counter() - start)], dtype=torch.float64)
    dist.all_reduce(rate)
    return rate.item() / dist.get_world_size()


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


class Burn(torch.autograd.Function):
    """Forward: nothing. Backward: parameter `index`'s share of the simulated
    backward, then its gradient."""

    @staticmethod
    def forward(ctx, param, model, index):
        ctx.model = model
        ctx.index = index
        ctx.shape = param.shape
        return param.new_zeros(())

    @staticmethod
    def backward(ctx, grad):
        m = ctx.model
        if m.mode == "work":
            for _ in range(m.work[ctx.index]):
                torch.mm(_A, _B, out=_C)
        else:
            until = m.t0 + m.done_at[ctx.index]
            if m.mode == "idle":
                left = until - time.perf_counter()
                if left > 0:
                    time.sleep(left)
            else:
                while time.perf_counter() < until:
                    torch.mm(_A, _B, out=_C)
        return torch.full(ctx.shape, 1.0), None, None


class Simulated(torch.nn.Module):
    def __init__(self, counts, seconds, rate):
        super().__init__()
        total = float(sum(counts))
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(c)) for c in counts])
        # Backward runs from the last parameter to the first.
        self.done_at = [0.0] * len(counts)
        acc = 0.0
        for i in reversed(range(len(counts))):
            acc += seconds * counts[i] / total
            self.done_at[i] = acc
        self.work = [int(round(seconds * c / total * rate)) for c in counts]
        self.mode = "busy"
        self.t0 = 0.0

    def forward(self, x):
        s = x
        for i, p in enumerate(self.params):
            s = s + Burn.apply(p, self, i)
        self.t0 = time.perf_counter()  # backward starts right after
        return s


def step(model, module):
    for p in module.parameters():
        p.grad = None
    loss = model(torch.zeros(()))
    loss.backward()


def main():
    rank, size, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    models = {}
    flat = None
    print("ok 0 torch=%s" % torch.__version__, flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "quit":
                break
            if words[0] == "setup":
                models = {}
                flat = None
                with open(words[1]) as f:
                    counts = [int(x) for x in f.read().split()]
                seconds = float(words[2])
                rate = calibrate()
                plain = Simulated(counts, seconds, rate)
                models = {"plain": (plain, plain)}
                ddp = Simulated(counts, seconds, rate)
                models["ddp"] = (DistributedDataParallel(ddp), ddp)
                if words[3] == "1":
                    ddpv = Simulated(counts, seconds, rate)
                    models["ddpv"] = (DistributedDataParallel(ddpv, gradient_as_bucket_view=True),
                                      ddpv)
                flat = torch.ones(sum(counts))
                # Untimed warm-up without compute: DDP rebuilds its buckets
                # after the first iterations.
                for model, module in models.values():
                    module.mode = "idle"
                    module.done_at_saved = module.done_at
                    module.done_at = [0.0] * len(counts)
                    for _ in range(3):
                        step(model, module)
                    module.done_at = module.done_at_saved
                dist.all_reduce(flat)
                print("ok 0", flush=True)
                continue
            if words[0] != "run":
                raise ValueError("unknown command " + words[0])
            what = words[1]
            dist.barrier()
            cpu = cpu_seconds()
            if what == "flat":
                start = time.perf_counter()
                dist.all_reduce(flat)
                elapsed = time.perf_counter() - start
            else:
                parts = what.split("_")
                key, mode = ("plain", parts[0]) if len(parts) == 1 else (parts[0], parts[1])
                if mode not in ("busy", "work", "idle"):
                    raise ValueError("unknown experiment " + what)
                model, module = models[key]
                module.mode = mode
                start = time.perf_counter()
                step(model, module)
                elapsed = time.perf_counter() - start
            print("ok %.6f %.6f" % (elapsed, cpu_seconds() - cpu), flush=True)
        except Exception as e:  # reported to the launcher, which fails the run
            print("error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
