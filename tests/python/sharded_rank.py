"""One rank of the sharded-checkpoint tests (slurmddp.ShardedCheckpointer)
over torch's Gloo group on loopback. argv: mode, DIR, then the mode's
arguments:
  save DIR STEP...   a DTensor of 8x4 sharded by rows over the ranks (CPU
                     device mesh) and a plain tensor, both filled from STEP;
                     saves each STEP with the sampler at position STEP;
                     KILL_AT=N: rank 1 is SIGKILLed after DCP wrote step N,
                     before its manifest
  load DIR           loads into a zeroed state of the same layout; prints
                     "rank R loaded STEP full=<sum of the whole tensor>
                     mine=<sum of this rank's shard> plain=<...> position=P"
                     or "rank R loaded none"
  old                prints the error ShardedCheckpointer() gives on a torch
                     without torch.distributed.checkpoint
"""
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import slurmddp
import slurmddp.torch


def state_of(step, world):
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(32, dtype=torch.float32).reshape(8, 4) + 1000 * step
    return {"model": {"w": distribute_tensor(full, mesh, [Shard(0)])},
            "plain": torch.full((3,), float(step))}


def main():
    mode = sys.argv[1]
    if mode == "old":
        try:
            slurmddp.ShardedCheckpointer("x")
        except slurmddp.InvalidArgument as e:
            print(e, flush=True)
        return
    directory = sys.argv[2]
    dist.init_process_group("gloo", init_method="slurmddp://", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt = slurmddp.ShardedCheckpointer(directory, per_job=os.environ.get("PER_JOB") == "1")
    if mode == "save":
        kill_at = os.environ.get("KILL_AT")
        for step in map(int, sys.argv[3:]):
            sampler = slurmddp.torch.DistributedSampler(1000, num_replicas=world, rank=rank,
                                                        shuffle=False)
            if kill_at == str(step) and rank == 1:
                real = slurmddp.sharded._sha256

                def dying(path):
                    os.kill(os.getpid(), signal.SIGKILL)
                    return real(path)
                slurmddp.sharded._sha256 = dying
            ckpt.save(step, state_of(step, world), sampler=sampler.state_dict(position=step))
        print(f"rank {rank} saved", flush=True)
    elif mode == "load":
        state = state_of(0, world)
        for t in (state["model"]["w"].to_local(), state["plain"]):
            t.zero_()
        try:
            c = ckpt.load_latest(state)
        except slurmddp.Error as e:
            print(f"rank {rank} error: {e}", flush=True)
            sys.exit(3)
        if c is None:
            print(f"rank {rank} loaded none", flush=True)
        else:
            w = state["model"]["w"]
            print(f"rank {rank} loaded {c.step} full={w.full_tensor().sum().item():.0f} "
                  f"mine={w.to_local().sum().item():.0f} plain={state['plain'].sum().item():.0f} "
                  f"position={c.sampler['position']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
