"""A rank of a small Lightning training with slurmddp.lightning.SlurmDDP, for
the tests (tests/system/lightning_test.cpp, lightning_test.py):

  hang R S    rank R's training_step sleeps 8 s at global step S (a stalled
              rank: the hang report names it, with SLURMDDP_HANG_AFTER=2s);
              every rank trains 20 steps and prints "rank N done at step M"
"""
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import lightning.pytorch as L
import slurmddp.lightning
import slurmddp.torch


class Model(L.LightningModule):
    def __init__(self, hang_rank: int, hang_step: int) -> None:
        super().__init__()
        self.net = nn.Linear(8, 2)
        self.hang_rank, self.hang_step = hang_rank, hang_step

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.hang_rank and self.global_step == self.hang_step:
            seconds = 8
            time.sleep(seconds)
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    mode, hang_rank, hang_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    assert mode == "hang", mode
    ddp = slurmddp.lightning.SlurmDDP("checkpoints")
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(640, 8, generator=g), torch.randint(0, 2, (640,), generator=g))
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    trainer = L.Trainer(accelerator="cpu", devices=per_node, num_nodes=nodes, strategy="ddp",
                        max_steps=20, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[ddp])
    rank = torch.distributed.get_rank()
    print(f"rank {rank} on {socket.gethostname()} ready", flush=True)
    trainer.fit(Model(hang_rank, hang_step), slurmddp.torch.DataLoader(data, batch_size=8))
    print(f"rank {rank} done at step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
