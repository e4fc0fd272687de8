#!/usr/bin/env python3
"""Plain PyTorch DDP training with no Slurm code at all.

Under srun with slurm-ddp installed, every task already has RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and GLOO_SOCKET_IFNAME), so the standard
env:// initialization just works:

    srun -N 2 -n 8 --ntasks-per-node=4 python3 train.py --epochs 2

or with one torchrun per node, which starts the ranks itself (torchrun.sbatch):

    srun -N 2 --ntasks-per-node=1 --gres=gpu:4 --ddp-launcher=torchrun torchrun train.py

With slurm-ddp's Python package installed (meson install, or PYTHONPATH=
build/python), it uses init_method="slurmddp://" (the step's authenticated
store instead of torch's open TCPStore; a rank that does not arrive is named)
and slurmddp.torch.DistributedSampler (the same indices as torch's; mid-epoch
resume without replaying batches), and says so; --plain keeps torch's own.

Trains a small MLP on Fashion-MNIST (Debian package dataset-fashion-mnist).
"""
import argparse
import gzip
import hashlib
import os
import signal
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:
    import slurmddp.torch as slurmddp_torch  # registers init_method="slurmddp://"
except ImportError:
    slurmddp_torch = None

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        ndim = magic & 0xFF
        dims = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")
    labels = os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")
    for p in (images, labels):
        if not os.path.exists(p):
            raise SystemExit(f"train.py: dataset file {p} is missing; install the Debian package "
                             f"dataset-fashion-mnist or pass --data DIR")
    x = read_idx(images).float().div_(255.0).sub_(0.2860).div_(0.3530).reshape(-1, 28 * 28)
    y = read_idx(labels).long()
    return TensorDataset(x, y)


# Preemption (--checkpoint PATH): Slurm's signals only set a flag; after every
# step all ranks all-reduce it, so they stop after the same step, rank 0 saves
# the model, the optimizer and the position (epoch, batch) with torch.save
# (temporary file + rename: never a partial checkpoint) and every rank exits
# with 75. A requeued run finds the file and continues from that position.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
EXIT_STOPPED = 75
stop_requested = 0


def on_stop_signal(signum, frame):
    global stop_requested
    stop_requested = signum


def save_checkpoint(path, model, opt, epoch, batch, step):
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                "epoch": epoch, "batch": batch, "step": step}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint", help="resume from and stop into this file (a shared path)")
    ap.add_argument("--log-every", type=int, default=0, help="rank 0 prints 'step N' every N steps")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    ap.add_argument("--plain", action="store_true",
                    help="torch's env:// and DistributedSampler even where slurm-ddp's package is installed")
    args = ap.parse_args()
    ours = slurmddp_torch is not None and not args.plain
    if args.checkpoint:
        for s in STOP_SIGNALS:
            signal.signal(s, on_stop_signal)

    torch.set_num_threads(1)
    use_cuda = torch.cuda.is_available()
    # env:// reads the plugin's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE;
    # slurmddp:// the same, plus SLURMDDP_TOKEN for an authenticated store.
    init_method = "slurmddp://" if ours else "env://"
    dist.init_process_group("nccl" if use_cuda else "gloo", init_method=init_method)
    # Where every rank is when a step hangs (scancel --signal=URG for one now).
    progress = slurmddp_torch.Progress() if ours else None
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        if ours:
            print(f"train.py: slurm-ddp's Python package {slurmddp_torch.__name__} is installed: "
                  f"init_method={init_method}, slurmddp.torch.DistributedSampler", flush=True)
        else:
            why = "--plain" if args.plain else "slurm-ddp's Python package is not installed"
            print(f"train.py: {why}: init_method={init_method}, torch's DistributedSampler",
                  flush=True)
    device = torch.device("cpu")
    if use_cuda:
        # The plugin's index within CUDA_VISIBLE_DEVICES; under torchrun
        # (--ddp-launcher=torchrun) each worker takes LOCAL_RANK's GPU.
        local = os.environ.get("SLURMDDP_LOCAL_DEVICE")
        index = int(local) if local is not None else int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", index % torch.cuda.device_count())
        torch.cuda.set_device(device)
    print(f"rank {rank}/{world} on {os.uname().nodename}: MASTER_ADDR={os.environ['MASTER_ADDR']} "
          f"MASTER_PORT={os.environ['MASTER_PORT']} LOCAL_RANK={os.environ['LOCAL_RANK']} "
          f"device={device}", flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    model = DDP(model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    first_epoch, skip, step = 0, 0, 0
    restarts = os.environ.get("SLURMDDP_RESTART_COUNT", os.environ.get("SLURM_RESTART_COUNT", "0"))
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        first_epoch, skip, step = state["epoch"], state["batch"], state["step"]
        if rank == 0:
            print(f"resumed from {args.checkpoint} at epoch {first_epoch + 1} batch {skip}, "
                  f"restart count {restarts}", flush=True)

    train, test = load(args.data, "train"), load(args.data, "test")
    make_sampler = slurmddp_torch.DistributedSampler if ours else DistributedSampler
    sampler = make_sampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    first_batch = 0
    if ours and skip:
        # Every rank's sampler continues after the batches already trained on
        # (rank 0 saved how many): no replay. A state_dict() saved by each
        # rank would do the same (it is checked against the rank's own
        # configuration).
        sampler.set_epoch(first_epoch)
        sampler.load_state_dict(sampler.state_dict(position=min(skip * args.batch_size, len(sampler))))
        first_batch, skip = skip, 0
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    flag = torch.zeros(1, device=device)
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start, seen, loss_sum = time.time(), 0, 0.0
        for batch, (x, y) in enumerate(loader, start=first_batch if epoch == first_epoch else 0):
            if args.steps and step >= args.steps:
                break
            if epoch == first_epoch and batch < skip:
                continue  # the same order as before the stop: set_epoch() is deterministic
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            seen += len(y)
            loss_sum += loss.item() * len(y)
            step += 1
            if progress is not None:
                progress.step_done(step)
            if args.log_every and step % args.log_every == 0 and rank == 0:
                print(f"step {step}", flush=True)
            if args.checkpoint:
                flag.fill_(float(stop_requested))
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                if flag.item() != 0:
                    if rank == 0:
                        save_checkpoint(args.checkpoint, model, opt, epoch, batch + 1, step)
                    dist.barrier()
                    for s in STOP_SIGNALS:  # on the way out: a second signal must not kill
                        signal.signal(s, signal.SIG_IGN)
                    print(f"rank {rank}: stopped at epoch {epoch + 1} batch {batch + 1} on "
                          f"{signal.Signals(int(flag.item())).name}", flush=True)
                    dist.destroy_process_group()
                    sys.exit(EXIT_STOPPED)
        stats = torch.tensor([loss_sum, float(seen)], device=device)
        dist.all_reduce(stats)
        model.eval()
        with torch.no_grad():
            correct = (model.module(test.tensors[0].to(device)).argmax(1) == test.tensors[1].to(device)).sum()
        if rank == 0:
            elapsed = time.time() - start
            print(f"epoch {epoch + 1}: loss {stats[0].item() / max(stats[1].item(), 1.0):.4f} "
                  f"test accuracy {100.0 * correct.item() / len(test):.2f}% "
                  f"{stats[1].item() / max(elapsed, 1e-9):.0f} samples/s", flush=True)
    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    print(f"rank {rank}: parameter sha256 {digest.hexdigest()[:16]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
