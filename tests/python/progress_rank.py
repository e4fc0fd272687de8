"""One rank of the hang report tests (slurmddp.torch.Progress): a training
loop of argv[2] steps of one all_reduce, over init_method="slurmddp://", then
what argv[1] says:
  loader   rank 2's data loader takes argv[3] seconds before step 5
  signal   each step computes 50 ms; rank 1 receives the report signal
           (SIGURG, as `scancel --signal=URG` sends it) before step 5
  compute  each step computes 20 ms (the signal comes from outside)
  straggler  every batch of rank 1 takes 30 ms to load; the data goes
           through progress.loader and the all_reduce is marked waiting
Prints "rank R training" when the loop starts and "rank R done steps=N
printed=P host=H" at the end.
"""
import os
import signal
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import slurmddp.torch


def batches(rank, slow_seconds, every_batch=0.0):
    step = 0
    while True:
        if rank == 2 and step == 5 and slow_seconds > 0:
            time.sleep(slow_seconds)  # a slow disk, say
        if every_batch > 0:
            time.sleep(every_batch)
        yield torch.full((4,), float(rank + step))
        step += 1


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    slow = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    dist.init_process_group("gloo", init_method="slurmddp://", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    progress = slurmddp.torch.Progress()
    loader = batches(rank, slow if mode == "loader" else 0.0)
    if mode == "straggler":
        loader = progress.loader(batches(rank, 0.0, 0.03 if rank == 1 else 0.0))
    print(f"rank {rank} training", flush=True)
    for step in range(steps):
        if mode == "signal":
            if rank == 1 and step == 5:
                os.kill(os.getpid(), signal.SIGURG)
            time.sleep(0.05)  # the step's compute
        elif mode == "compute":
            time.sleep(0.02)
        t = next(loader)
        if mode == "straggler":
            time.sleep(0.005)  # compute
            with progress.waiting("all_reduce"):
                dist.all_reduce(t)
        else:
            dist.all_reduce(t)
        want = sum(r + step for r in range(world))
        if t[0].item() != want:
            print(f"rank {rank} step {step}: got {t[0].item()}, want {want}", file=sys.stderr)
            sys.exit(1)
        progress.step_done(step)
    print(f"rank {rank} done steps={steps} printed={progress.reports_printed} "
          f"host={socket.gethostname()}", flush=True)
    progress.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
