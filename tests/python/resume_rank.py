"""One rank of the preemption tests (slurmddp.StopSignal, Checkpointer,
requeue_and_exit) over torch's Gloo group on loopback. argv: mode, init method
("slurmddp" or "env"), then the mode's arguments:
  stop DIR STEPS SIGNAL_AT   a loop of STEPS steps of one all_reduce; rank 1
                             sends itself SIGUSR1 before step SIGNAL_AT (0:
                             never; the test may signal from outside); on an
                             agreed stop: checkpoint into DIR, then
                             requeue_and_exit(). Prints "rank R step N" after
                             each step and "rank R stopped at N on SIG".
  train DIR STEPS SIGNAL_AT  a small DDP model, STEPS steps, resuming from DIR
                             and stopping into it on a signal (rank 1 sends
                             itself SIGUSR1 before step SIGNAL_AT); prints the
                             parameters' sha256
  save DIR SCOPE STEP...     (PER_JOB=1: in DIR/job-<id>) saves each STEP (state: rank and step; sampler at
                             position STEP); KILL_AT=N: rank 2 is SIGKILLed
                             inside the write of its file for step N
  load DIR SCOPE             (PER_JOB=1: in DIR/job-<id>) prints "rank R loaded STEP state=... position=P" or
                             "rank R loaded none"
  loader DIR STEPS SIGNAL_AT WORKERS
                             "train" over a DataLoader of a dataset with
                             WORKERS worker processes (prefetching), the
                             docs' five lines; prints the samples trained on
                             ("rank R samples ...") and the parameters' sha256
  unsafe DIR                 saves a state holding a numpy array (weights_only)
  desync DIR                 checks stop at steps 1..6; rank 1 skips step 3
  late DIR                   a signal.signal handler installed after StopSignal()
"""
import hashlib
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import slurmddp
import slurmddp.torch


def init(method):
    url = "slurmddp://" if method == "slurmddp" else "env://"
    dist.init_process_group("gloo", init_method=url, timeout=timedelta(seconds=60))
    return dist.get_rank(), dist.get_world_size()


def stop_loop(rank, directory, steps, signal_at):
    stop = slurmddp.StopSignal()
    ckpt = slurmddp.Checkpointer(directory)
    t = torch.ones(1)
    for step in range(1, steps + 1):
        if rank == 1 and step == signal_at:
            os.kill(os.getpid(), signal.SIGUSR1)
        dist.all_reduce(t)
        print(f"rank {rank} step {step}", flush=True)
        if stop.should_stop(step):
            ckpt.save(step, {"step": step})
            print(f"rank {rank} stopped at {step} on {stop.signal_name}", flush=True)
            slurmddp.requeue_and_exit()
    print(f"rank {rank} finished", flush=True)


def data(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randint(0, 4, (16,), generator=g)


def train(rank, directory, steps, signal_at):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    stop = slurmddp.StopSignal()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ckpt = slurmddp.Checkpointer(directory)
    step = 0
    resumed = ckpt.load_latest()
    if resumed is not None:
        if os.environ.get("SETTLE", "1") == "1":
            slurmddp.torch.settle_ddp(model, torch.zeros(1, 32))
        model.module.load_state_dict(resumed.state["model"])
        opt.load_state_dict(resumed.state["optimizer"])
        step = resumed.step
        print(f"rank {rank} resumed at {step}", flush=True)
    while step < steps:
        if rank == 1 and step + 1 == signal_at:
            os.kill(os.getpid(), signal.SIGUSR1)
        x, y = data(step, rank)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        step += 1
        print(f"rank {rank} step {step}", flush=True)
        if stop.should_stop(step):
            ckpt.save(step, {"model": model.module.state_dict(), "optimizer": opt.state_dict()})
            print(f"rank {rank} stopped at {step}", flush=True)
            slurmddp.requeue_and_exit()
    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().numpy().tobytes())
    print(f"rank {rank} sha256 {digest.hexdigest()}", flush=True)


class Samples(torch.utils.data.Dataset):
    """Sample i: a fixed input and label from a generator seeded by i."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), int(torch.randint(0, 4, (1,), generator=g)), i


def loader(rank, world, directory, steps, signal_at, workers):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    stop = slurmddp.StopSignal()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = slurmddp.torch.DistributedSampler(Samples(), shuffle=True, seed=3)
    data = torch.utils.data.DataLoader(Samples(), batch_size=4, sampler=sampler,
                                       num_workers=workers)
    ckpt = slurmddp.Checkpointer(directory)
    step, epoch = 0, 0
    if (c := ckpt.load_latest()) is not None:
        slurmddp.torch.settle_ddp(model, torch.zeros(1, 32))
        model.module.load_state_dict(c.state["model"])
        opt.load_state_dict(c.state["opt"])
        sampler.load_state_dict(c.sampler)
        step, epoch = c.step, sampler.epoch
        print(f"rank {rank} resumed at {step} epoch {epoch} position {c.sampler['position']}",
              flush=True)
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y, i in data:
            if rank == 1 and step + 1 == signal_at:
                os.kill(os.getpid(), signal.SIGUSR1)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            step += 1
            print(f"rank {rank} samples {' '.join(map(str, i.tolist()))}", flush=True)
            if stop.should_stop(step):
                ckpt.save(step, {"model": model.module.state_dict(), "opt": opt.state_dict()},
                          sampler=sampler)
                print(f"rank {rank} stopped at {step}", flush=True)
                slurmddp.requeue_and_exit()
            if step == steps:
                break
        epoch += 1
    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().numpy().tobytes())
    print(f"rank {rank} sha256 {digest.hexdigest()}", flush=True)


class Position:
    """A sampler stand-in: the state_dict a slurmddp.torch.DistributedSampler gives."""

    def __init__(self, world, rank, at):
        self.sampler = slurmddp.torch.DistributedSampler(1000, num_replicas=world, rank=rank,
                                                          shuffle=False)
        self.at = at

    def state_dict(self):
        return self.sampler.state_dict(position=self.at)


def main():
    mode, method, directory = sys.argv[1], sys.argv[2], sys.argv[3]
    rank, world = init(method)
    per_job = os.environ.get("PER_JOB") == "1"
    if mode == "stop":
        stop_loop(rank, directory, int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "train":
        train(rank, directory, int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "save":
        kill_at = os.environ.get("KILL_AT")
        if kill_at and rank == 2:
            writer = slurmddp._core.CheckpointWriter

            class DyingWriter:
                """Killed with its file written, before it is renamed into place."""

                def __init__(self, directory, name, *args):
                    self.directory, self.w = directory, writer(directory, name, *args)

                def __getattr__(self, name):
                    return getattr(self.w, name)

                def commit(self):
                    if self.directory.endswith(f"step-{kill_at}"):
                        os.kill(os.getpid(), signal.SIGKILL)
                    self.w.commit()
            slurmddp._core.CheckpointWriter = DyingWriter
        ckpt = slurmddp.Checkpointer(directory, scope=sys.argv[4], per_job=per_job)
        try:
            for step in map(int, sys.argv[5:]):
                ckpt.save(step, {"rank": rank, "step": step}, sampler=Position(world, rank, step))
        except slurmddp.Error as e:
            print(f"rank {rank} error: {e}", flush=True)
            sys.exit(3)
        print(f"rank {rank} saved", flush=True)
    elif mode == "loader":
        loader(rank, world, directory, *map(int, sys.argv[4:7]))
    elif mode == "unsafe":
        import numpy
        ckpt = slurmddp.Checkpointer(directory)
        try:
            ckpt.save(1, {"weights": numpy.ones(3)})
        except slurmddp.Error as e:
            print(f"rank {rank} {type(e).__name__}: {e}", flush=True)
            sys.exit(3)
    elif mode == "desync":
        stop = slurmddp.StopSignal()
        try:
            for step in range(1, 7):
                if rank == 1 and step == 3:
                    continue
                stop.should_stop(step)
            stop.close()
        except slurmddp.Error as e:
            print(f"rank {rank} error: {e}", flush=True)
            sys.exit(3)
    elif mode == "late":
        seen = []
        stop = slurmddp.StopSignal()
        signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))  # e.g. a trainer's
        stop.should_stop(1)  # puts StopSignal's back in front
        if rank == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        step = 2
        while not stop.should_stop(step) and step < 20:
            step += 1
        print(f"rank {rank} stopped at {stop.stopped_at} on {stop.signal_name or '-'}; later "
              f"handler called {len(seen)} times", flush=True)
    elif mode == "load":
        ckpt = slurmddp.Checkpointer(directory, scope=sys.argv[4], per_job=per_job)
        try:
            c = ckpt.load_latest()
        except slurmddp.Error as e:
            print(f"rank {rank} error: {e}", flush=True)
            sys.exit(3)
        if c is None:
            print(f"rank {rank} loaded none", flush=True)
        else:
            print(f"rank {rank} loaded {c.step} state={c.state['rank']},{c.state['step']} "
                  f"position={c.sampler['position']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
