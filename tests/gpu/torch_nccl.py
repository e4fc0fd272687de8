"""The Python package under an NCCL default group, on the GPU (scripts/gpu-check).

    torch_nccl.py [--ranks N] [--steps S] [--dir DIR] [--timeout-s T] [--dry-run]

Starts N rank processes on this machine (rank r on GPU r modulo the GPUs;
ranks beyond the GPUs share one the way the gpu suite's ranks do, Note [Sharing
one GPU] in tests/gpu/nccl_ranks.cpp), each of which:
  - makes a slurmddp.StopSignal, then dist.init_process_group("nccl") and
    checks that the default group really is NCCL's (a Gloo stand-in fails);
  - trains a small model wrapped in DistributedDataParallel on its GPU, with
    rank-dependent data, and checks that the parameters stay equal on every
    rank (DDP's allreduce over NCCL);
  - asks should_stop(step) every step while the last rank requests a stop at
    step 2: every rank must agree on the same stop step, one check later
    (slurmddp's side group: Gloo beside the NCCL default group);
  - saves a checkpoint with slurmddp.Checkpointer at that step and reads it
    back with load_latest() onto its GPU: the step and every parameter equal.
Exit status: 0 when every rank passed, 1 when one failed, 77 when this
machine has no CUDA device or torch no NCCL (saying which; never a fallback to
Gloo).

--dry-run (a CPU machine): the options, torch's names this uses (DDP, the NCCL
backend's name) and slurmddp's (StopSignal, Checkpointer and the arguments
used, read from the package's sources so that no build is needed), then the
plan; exit 0, or 1 naming what is missing.
"""
from __future__ import annotations

import argparse
import ast
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(HERE, "..", "..", "python", "slurmddp")
SKIP = 77
STOP_AT = 2  # the step at which the last rank requests a stop

# What this check uses of slurmddp: class -> methods, and constructor keywords.
USED_METHODS = {"StopSignal": {"should_stop", "request", "close"},
                "Checkpointer": {"save", "load_latest"}}
USED_KEYWORDS = {"StopSignal.__init__": {"check_every"}, "Checkpointer.__init__": {"per_job"},
                 "Checkpointer.load_latest": {"map_location"}}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torch_nccl.py")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--dir", default="torch-nccl-checkpoints")
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # a rank process
    a = p.parse_args()
    if a.ranks < 2 or a.steps <= STOP_AT + 1 or a.timeout_s <= 0:
        p.error(f"--ranks={a.ranks} (>= 2), --steps={a.steps} (> {STOP_AT + 1}) and "
                f"--timeout-s={a.timeout_s} (> 0) expected")
    return a


def log(rank: int, text: str) -> None:
    print(f"torch_nccl: rank {rank}: {text}", flush=True)


# ---- --dry-run


def package_api() -> Dict[str, set]:
    """Methods and keywords of the package's classes, from its sources."""
    api: Dict[str, set] = {}
    nodes = []
    for name in sorted(os.listdir(PACKAGE_DIR)):
        if name.endswith(".py"):
            path = os.path.join(PACKAGE_DIR, name)
            nodes += ast.parse(open(path, encoding="utf-8").read(), path).body
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            api[node.name] = methods
            for f in node.body:
                if isinstance(f, ast.FunctionDef):
                    a = f.args
                    api[f"{node.name}.{f.name}"] = {x.arg for x in a.args + a.kwonlyargs}
    return api


def dry_run(a: argparse.Namespace) -> int:
    missing: List[str] = []
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel  # noqa: F401
        torch_text = f"torch {torch.__version__}"
        if not dist.is_available():
            missing.append(f"torch {torch.__version__} was built without torch.distributed")
        elif getattr(dist.Backend, "NCCL", None) != "nccl":
            missing.append(f"torch {torch.__version__} names no NCCL backend")
    except ImportError as e:
        torch_text = f"no torch ({e}): the device run will say SKIP"
    api = package_api()
    for cls, methods in USED_METHODS.items():
        for m in sorted(methods - api.get(cls, set())):
            missing.append(f"slurmddp.{cls}.{m} (in {os.path.normpath(PACKAGE_DIR)})")
    for fn, kws in USED_KEYWORDS.items():
        for k in sorted(kws - api.get(fn, set())):
            missing.append(f"slurmddp.{fn}(..., {k}=...)")
    if missing:
        print("torch_nccl: dry run: missing: " + "; ".join(missing), file=sys.stderr)
        return 1
    print(f"torch_nccl: dry run: {a.ranks} ranks, {a.steps} steps, backend nccl (no fallback), "
          f"stop requested at step {STOP_AT}, checkpoints in {a.dir}; {torch_text}; "
          f"slurmddp's StopSignal and Checkpointer have what is used; stopping before the "
          f"first CUDA call")
    return 0


# ---- the launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def share_env(rank: int) -> Dict[str, str]:
    """Note [Sharing one GPU] in tests/gpu/nccl_ranks.cpp."""
    return {"NCCL_HOSTID": f"torch-nccl-rank-{rank}", "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
            "NCCL_NVLS_ENABLE": "0", "NCCL_MULTI_RANK_GPU_ENABLE": "1"}


def launch(a: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print(f"torch_nccl: torch {torch.__version__} sees no CUDA device (CUDA "
              f"{torch.version.cuda}); not run (no Gloo stand-in)", file=sys.stderr)
        return SKIP
    if not dist.is_available() or not dist.is_nccl_available():
        print(f"torch_nccl: torch {torch.__version__} has no NCCL backend; not run (no Gloo "
              f"stand-in)", file=sys.stderr)
        return SKIP
    gpus = torch.cuda.device_count()
    port = free_port()
    procs = []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME="lo")
        if gpus < a.ranks:
            env.update(share_env(r))
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--ranks",
               str(a.ranks), "--steps", str(a.steps), "--dir", a.dir, "--timeout-s",
               str(a.timeout_s)]
        procs.append(subprocess.Popen(cmd, env=env))
    deadline = time.monotonic() + a.timeout_s + 30
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(f"killed after {a.timeout_s + 30:.0f} s")
    print(f"torch_nccl: {a.ranks} ranks on {gpus} GPU(s), exit statuses {codes}")
    return 0 if all(c == 0 for c in codes) else 1


# ---- one rank


def run_rank(a: argparse.Namespace) -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import slurmddp

    rank = a.rank
    stop = slurmddp.StopSignal()  # before init, as the package asks
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", rank % gpus)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", timeout=timedelta(seconds=a.timeout_s))
    backend = str(dist.get_backend())
    if backend != "nccl":
        raise RuntimeError(f"the default group is {backend!r}, not nccl")
    nccl = torch.cuda.nccl.version()  # a tuple, or an int in older torch
    nccl_text = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    log(rank, f"torch {torch.__version__}, NCCL {nccl_text}, {device} "
              f"({torch.cuda.get_device_name(device)}), default group {backend}")

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(device),
                device_ids=[device.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt = slurmddp.Checkpointer(a.dir, per_job=False)
    stopped_at = -1
    for step in range(a.steps):
        gen = torch.Generator().manual_seed(1000 * rank + step)  # data differs per rank
        x = torch.randn(16, 32, generator=gen).to(device)
        y = torch.randn(16, 4, generator=gen).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if rank == a.ranks - 1 and step == STOP_AT:
            stop.request(signal.SIGUSR1)
        if stop.should_stop(step):
            stopped_at = step
            break
    if stopped_at < 0:
        raise RuntimeError(f"no stop agreed in {a.steps} steps (requested at step {STOP_AT})")

    # The same parameters everywhere, and the same stop step.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    spread = flat.clone()
    low = flat.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not torch.equal(spread, low):
        raise RuntimeError(f"parameters differ between ranks by up to "
                           f"{(spread - low).abs().max().item()}")
    steps = torch.tensor([stopped_at, -stopped_at], device=device)
    dist.all_reduce(steps, op=dist.ReduceOp.MAX)
    if steps.tolist() != [stopped_at, -stopped_at]:
        raise RuntimeError(f"ranks stopped at different steps (this one at {stopped_at})")
    log(rank, f"parameters equal on every rank; stop ({stop.signal_name}) agreed at step "
              f"{stopped_at}")

    path = ckpt.save(stopped_at, {"model": model.module.state_dict()})
    resumed = ckpt.load_latest(map_location=device)
    if resumed is None or resumed.step != stopped_at:
        raise RuntimeError(f"load_latest() gave {None if resumed is None else resumed.step}, "
                           f"expected step {stopped_at} ({path})")
    for name, value in model.module.state_dict().items():
        got = resumed.state["model"][name]
        if got.device != device or not torch.equal(got, value):
            raise RuntimeError(f"checkpoint {path}: {name} differs (or is on {got.device})")
    log(rank, f"checkpoint of step {stopped_at} saved and loaded back onto {device}: {path}")
    stop.close()
    dist.destroy_process_group()
    return 0


def main() -> int:
    a = parse()
    if a.dry_run:
        return dry_run(a)
    if a.rank < 0:
        return launch(a)
    try:
        return run_rank(a)
    except Exception as e:  # noqa: BLE001 (the rank's failure, reported with its number)
        log(a.rank, f"FAILED: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
