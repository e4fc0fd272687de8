# A plain PyTorch program with no Slurm code: it relies on the environment the
# plugin exports (env:// rendezvous). Each rank contributes rank + 1.
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"torch rank={rank} world={world} sum={int(t.item())}", flush=True)
dist.destroy_process_group()
