#!/usr/bin/env python3
"""Plain PyTorch DDP training with no Slurm code at all.

Under srun with slurm-ddp installed, every task already has RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and GLOO_SOCKET_IFNAME), so the standard
env:// initialization just works:

    srun -N 2 -n 8 --ntasks-per-node=4 python3 train.py --epochs 2

or with one torchrun per node, which starts the ranks itself (torchrun.sbatch):

    srun -N 2 --ntasks-per-node=1 --gres=gpu:4 --ddp-launcher=torchrun torchrun train.py

With slurm-ddp's Python package installed (pip install, or PYTHONPATH=
build/python), it uses init_method="slurmddp://" (the step's authenticated
store instead of torch's open TCPStore; a rank that does not arrive is named;
under torchrun, torchrun's own env://) and slurmddp.torch.DistributedSampler
(the same indices as torch's; mid-epoch resume without replaying batches), and
says so; --plain keeps torch's own.

Preemption (--checkpoint-dir DIR, needs the package): Slurm's stop signals
(scancel, preemption, --signal=USR1@120 before the time limit) make every rank
stop after the same step; the checkpoint goes to DIR/job-<id>; with
--on-stop=requeue rank 0 requeues the job and the ranks exit with 75. The
requeued job resumes mid-epoch, bit-identical to an uninterrupted run with
--deterministic (examples/jobs/preemptible-pytorch.sbatch).

Trains a small MLP on Fashion-MNIST (Debian package dataset-fashion-mnist).
"""
import argparse
import gzip
import hashlib
import os
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
    import slurmddp
    import slurmddp.torch as slurmddp_torch  # registers init_method="slurmddp://"
except ImportError:
    slurmddp = slurmddp_torch = None

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-dir", help="resume from and stop into DIR/job-<id> (shared)")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every N steps")
    ap.add_argument("--on-stop", choices=("exit", "requeue"), default="exit",
                    help="after the stop checkpoint: exit with 75, or requeue the job first")
    ap.add_argument("--deterministic", action="store_true",
                    help="torch.use_deterministic_algorithms(True): a resumed run ends bit-identical")
    ap.add_argument("--log-every", type=int, default=0, help="rank 0 prints 'step N' every N steps")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    ap.add_argument("--plain", action="store_true",
                    help="torch's env:// and DistributedSampler even where slurm-ddp's package is installed")
    args = ap.parse_args()
    ours = slurmddp_torch is not None and not args.plain
    if args.checkpoint_dir and not ours:
        raise SystemExit("train.py: --checkpoint-dir needs slurm-ddp's Python package (slurmddp), "
                         + ("not --plain" if args.plain else "which is not installed"))
    # Before anything else: a stop signal while the job starts is kept.
    stop = slurmddp.StopSignal() if args.checkpoint_dir else None

    torch.set_num_threads(1)
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic mode
        torch.use_deterministic_algorithms(True)
    use_cuda = torch.cuda.is_available()
    # env:// reads the plugin's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE;
    # slurmddp:// the same, plus SLURMDDP_TOKEN for an authenticated store.
    # Under torchrun (it sets TORCHELASTIC_RUN_ID) the ranks and their store are
    # torchrun's: slurmddp:// cannot join its static rendezvous, so env://, and
    # no hang report (it lives on the slurmddp:// store); the sampler, the stop
    # agreement and the checkpoints work on any process group.
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    init_method = "slurmddp://" if ours and not under_torchrun else "env://"
    dist.init_process_group("nccl" if use_cuda else "gloo", init_method=init_method)
    # Where every rank is when a step hangs (scancel --signal=URG for one now).
    progress = slurmddp_torch.Progress() if init_method == "slurmddp://" else None
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        if ours and under_torchrun:
            print("train.py: under torchrun: init_method=env:// (torchrun's rendezvous), "
                  "slurmddp.torch.DistributedSampler, no hang report", flush=True)
        elif ours:
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

    train, test = load(args.data, "train"), load(args.data, "test")
    make_sampler = slurmddp_torch.DistributedSampler if ours else DistributedSampler
    sampler = make_sampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    first_epoch, first_batch, step = 0, 0, 0
    ckpt = slurmddp.Checkpointer(args.checkpoint_dir) if args.checkpoint_dir else None
    resumed = ckpt.load_latest(map_location=device) if ckpt else None
    if resumed:
        # DDP's first iteration on a throwaway input, so that the resumed steps
        # reduce gradients in the same bucket layout as before the stop.
        slurmddp_torch.settle_ddp(model, torch.zeros(1, 28 * 28, device=device))
        model.module.load_state_dict(resumed.state["model"])
        opt.load_state_dict(resumed.state["optimizer"])
        sampler.load_state_dict(resumed.sampler)  # this rank's position: no replayed batch
        first_epoch, step = sampler.epoch, resumed.step
        first_batch = resumed.sampler["position"] // args.batch_size
        if rank == 0:
            print(f"resumed from {resumed.path} at step {step} (epoch {first_epoch + 1}), run "
                  f"{slurmddp.run_id()}, restart count {slurmddp.restart_count()}", flush=True)

    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start, seen, loss_sum = time.time(), 0, 0.0
        for batch, (x, y) in enumerate(loader, start=first_batch if epoch == first_epoch else 0):
            if args.steps and step >= args.steps:
                break
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
            if ckpt and (stop.should_stop(step) or
                         (args.checkpoint_every and step % args.checkpoint_every == 0)):
                position = min((batch + 1) * args.batch_size, len(sampler))
                ckpt.save(step, {"model": model.module.state_dict(), "optimizer": opt.state_dict()},
                          sampler=sampler.state_dict(position=position))
                if stop.agreed_signal is not None:
                    print(f"rank {rank}: stopped after step {step} on {stop.signal_name}, "
                          f"checkpoint in {ckpt.dir}", flush=True)
                    if args.on_stop == "requeue":
                        slurmddp.requeue_and_exit()  # rank 0 requeues; every rank exits 75
                    dist.destroy_process_group()
                    sys.exit(slurmddp.EXIT_REQUEUE)
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
