#!/usr/bin/env python3
"""A PyTorch Lightning training (the MLP on Fashion-MNIST of train.py) that
survives preemption with slurm-ddp's Lightning callback.

    srun -N 2 --ntasks-per-node=2 python3 lightning_train.py --checkpoint-dir checkpoints

The lines slurm-ddp adds to a Lightning script (marked "slurm-ddp" below):

    ddp = SlurmDDP("checkpoints")                         # before the Trainer
    trainer = L.Trainer(..., callbacks=[ddp])
    trainer.fit(model, ckpt_path=ddp.ckpt_path)

and, for a mid-epoch resume without replayed or skipped batches,
slurmddp.torch.DataLoader in place of torch's. On SIGTERM, SIGUSR1 (Slurm's
--signal=USR1@120 before the time limit, scancel --signal=USR1), SIGUSR2 or
SIGHUP, every rank stops after the same step, the checkpoint goes to
checkpoints/job-<id>, rank 0 requeues the job and the ranks exit with 75; the
requeued job resumes there (examples/jobs/preemptible-lightning.sbatch). With
--deterministic the resumed run ends with the parameters of a run that was
never interrupted, bit for bit.
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import lightning.pytorch as L
from slurmddp.lightning import SlurmDDP  # slurm-ddp
from slurmddp.torch import DataLoader  # slurm-ddp: resumable mid-epoch

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from train import DEFAULT_DATA, load  # noqa: E402 (the example's dataset reader)


class MLP(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class LogSteps(L.Callback):
    """Rank 0 prints 'step N' every N optimizer steps (the tests wait for it)."""

    def __init__(self, every: int) -> None:
        self.every = every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.every and trainer.global_step % self.every == 0 and trainer.is_global_zero:
            print(f"step {trainer.global_step}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-dir", default="checkpoints")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--deterministic", action="store_true")
    args = ap.parse_args()

    ddp = SlurmDDP(args.checkpoint_dir)  # slurm-ddp: first, so that an early signal is kept
    torch.set_num_threads(1)
    L.seed_everything(0, workers=True)
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    gpu = torch.cuda.is_available()
    trainer = L.Trainer(
        accelerator="gpu" if gpu else "cpu", devices=per_node, num_nodes=nodes,
        strategy="ddp", max_epochs=args.epochs, deterministic=args.deterministic,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ddp, LogSteps(args.log_every)])  # slurm-ddp: ddp
    model = MLP(args.lr)
    loader = DataLoader(load(args.data, "train"), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    trainer.fit(model, loader, ckpt_path=ddp.ckpt_path)  # slurm-ddp: ckpt_path

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    print(f"rank {trainer.global_rank}: parameter sha256 {digest.hexdigest()[:16]} after step "
          f"{trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
