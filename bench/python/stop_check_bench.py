#!/usr/bin/env python3
"""stop_check_bench.py: what an agreed stop check costs a PyTorch training step.

What it measures: the time of one training step of the example's model
(examples/pytorch/train.py: Linear(784, 256), ReLU, Linear(256, 10); batch 32
per rank; DDP over torch's Gloo group; SGD with momentum) at --ranks processes
on this machine over loopback, with, after every step:

  none            nothing (the step alone)
  torch           torch's own way: a one-element tensor holding the local stop
                  flag, dist.all_reduce(flag, MAX), flag.item() (what
                  hand-written preemption code does, and what train.py did)
  slurmddp        slurmddp.StopSignal().should_stop(step) (one int64
                  all-reduce, started without waiting and read at the next
                  check: it overlaps the next step)
  slurmddp/10     the same with check_every=10

How each run goes: the parent starts --ranks children (this script re-run with
the hidden flag --child) with one rank's environment each (MASTER_ADDR=
127.0.0.1, a free port, RANK, WORLD_SIZE, GLOO_SOCKET_IFNAME=lo), one thread
each (torch.set_num_threads(1)). Each child builds the model and, per
repetition, runs every configuration in turn (the order rotates with the
repetition): --warmup untimed steps, a barrier, then --steps timed steps
(time.perf_counter around the loop). Rank 0 prints one row per configuration
and repetition; the parent prints the median over --reps repetitions.

Columns (one row per configuration; times in microseconds):
  config ranks steps reps step_us_median overhead_us_median min_us max_us
where overhead is step_us minus the "none" row's step_us of the same
repetition. The model's data is random and fixed (no loader).

How to run (the package built by `ninja -C build`; torch importable):

  PYTHONPATH=build/python /usr/bin/python3 bench/python/stop_check_bench.py --ranks 4
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

CONFIGS = ("none", "torch", "slurmddp", "slurmddp/10")


def child(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    import slurmddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 784), torch.randint(0, 10, (32,))
    flag = torch.zeros(1)
    stops = {"slurmddp": None, "slurmddp/10": None}

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def run(config, n, first):
        stop = stops.get(config)
        for i in range(first, first + n):
            step()
            if config == "torch":
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                if flag.item() != 0:
                    raise SystemExit("unexpected stop")
            elif stop is not None and stop.should_stop(i):
                raise SystemExit("unexpected stop")

    counter = 1
    for rep in range(args.reps):
        order = CONFIGS[rep % len(CONFIGS):] + CONFIGS[:rep % len(CONFIGS)]
        for config in order:
            if config.startswith("slurmddp"):
                stops[config] = slurmddp.StopSignal(check_every=10 if "/" in config else 1)
            run(config, args.warmup, counter)
            counter += args.warmup
            dist.barrier()
            t0 = time.perf_counter()
            run(config, args.steps, counter)
            elapsed = time.perf_counter() - t0
            counter += args.steps
            if config.startswith("slurmddp"):
                stops[config].close()
                stops[config] = None
            if rank == 0:
                print(f"rep {rep} {config} {elapsed / args.steps * 1e6:.1f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    port = free_port()
    procs = []
    for r in range(args.ranks):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM", "SLURMDDP_", "PMIX", "TORCHELASTIC"))}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(r), GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child", "--steps", str(args.steps), "--warmup",
             str(args.warmup), "--reps", str(args.reps)], env=env,
            stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True))
    try:
        out, _ = procs[0].communicate(timeout=args.timeout)
        for p in procs[1:]:
            p.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise SystemExit(f"stop_check_bench: not done within {args.timeout} s")
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"stop_check_bench: ranks exited with "
                         f"{[p.returncode for p in procs]}")
    per = {}  # (rep, config) -> us
    for line in out.splitlines():
        _, rep, config, us = line.split()
        per[(int(rep), config)] = float(us)
    print("config ranks steps reps step_us_median overhead_us_median min_us max_us")
    for config in CONFIGS:
        steps = [per[(r, config)] for r in range(args.reps)]
        over = [per[(r, config)] - per[(r, "none")] for r in range(args.reps)]
        print(f"{config} {args.ranks} {args.steps} {args.reps} {statistics.median(steps):.1f} "
              f"{statistics.median(over):.1f} {min(steps):.1f} {max(steps):.1f}")


if __name__ == "__main__":
    main()
