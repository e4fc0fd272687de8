#!/usr/bin/python3
"""torch.distributed all_reduce (gloo backend, float32, sum), ranks as processes
on loopback, with the same method and columns as gloo_allreduce_bench:

  size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong

Per size: untimed warm-up, repetitions that each start from a barrier; a
repetition's time is the slowest rank's; the row shows the median over
repetitions. GB = 1e9, busbw = algbw * 2(n-1)/n. Exit status 1 on any wrong
element.

Run it with /usr/bin/python3 (Debian's python3-torch is only importable there).
With --from-environment every task is a rank of init_process_group("gloo",
"env://") under srun: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as the
slurm-ddp plugin exports them (GLOO_SOCKET_IFNAME names the interface).
"""
import argparse
import os
import socket
import sys
import time


def iterations_for(args, nbytes):
    if args.iters > 0:
        return args.iters
    return max(5, min(200, (1 << 30) // nbytes))


def warmup_for(args, nbytes):
    if args.warmup >= 0:
        return args.warmup
    return 1 if nbytes >= (64 << 20) else 3


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if port is None:
        dist.init_process_group("gloo", init_method="env://")
        rank = dist.get_rank()
        where = "ranks under the launcher (env://)"
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=args.ranks)
        where = "ranks as processes"
    n = dist.get_world_size()
    hosts = [None] * n
    dist.all_gather_object(hosts, f"{socket.gethostname()}/{os.getpid()}")
    if rank == 0:
        print("# torch allreduce benchmark: torch.distributed gloo backend "
              "(bench/comm/torch_gloo_allreduce.py)")
        print(f"# torch {torch.__version__}, {n} {where}, "
              f"GLOO_SOCKET_IFNAME={os.environ.get('GLOO_SOCKET_IFNAME', '')}")
        print("# per size: untimed warm-up, repetitions from a barrier, time = median over "
              "repetitions of the slowest rank; GB = 1e9, busbw = algbw * 2(n-1)/n")
        print("# rank:host/pid" + "".join(f" {r}:{h}" for r, h in enumerate(hosts)))
        print("#%13s %12s %8s %6s %12s %12s %12s %8s" % (
            "size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
            "#wrong"))
        sys.stdout.flush()
    total_wrong = 0
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = nbytes // 4
        idx = torch.arange(count, dtype=torch.int64)
        k = (idx % 7 + 1).to(torch.float32)
        s = 1.0 - 2.0 * (idx % 2).to(torch.float32)
        src = s * k * float(rank + 1)
        want = s * k * float(n * (n + 1) // 2)
        buf = torch.empty_like(src)
        reps = iterations_for(args, nbytes)
        for _ in range(warmup_for(args, nbytes)):
            buf.copy_(src)
            dist.all_reduce(buf)
        times = torch.zeros(reps, dtype=torch.float64)
        for r in range(reps):
            buf.copy_(src)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            t1 = time.perf_counter()
            times[r] = (t1 - t0) * 1e6
        wrong = torch.tensor([int((buf != want).sum().item())], dtype=torch.int64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        total_wrong += int(wrong.item())
        if rank == 0:
            median = float(times.median().item()) if reps % 2 else float(
                times.sort().values[reps // 2 - 1:reps // 2 + 1].mean().item())
            algbw = nbytes / median / 1e3
            busbw = algbw * 2.0 * (n - 1) / n
            print(" %13d %12d %8s %6s %12.1f %12.3f %12.3f %8d" % (
                nbytes, count, "float", "sum", median, algbw, busbw, int(wrong.item())))
            sys.stdout.flush()
        nbytes *= args.factor
    dist.barrier()
    dist.destroy_process_group()
    return 0 if total_wrong == 0 else 1


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--from-environment", action="store_true",
                   help="be one rank of init_process_group('gloo', 'env://'), as under srun")
    p.add_argument("--worker-rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--worker-port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.from_environment:
        return worker(-1, args, None)
    if args.worker_rank >= 0:
        return worker(args.worker_rank, args, args.worker_port)

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    port = free_port()
    import subprocess
    procs = []
    for r in range(args.ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--ranks", str(args.ranks),
               "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
               "--factor", str(args.factor), "--iters", str(args.iters),
               "--warmup", str(args.warmup), "--worker-rank", str(r), "--worker-port", str(port)]
        procs.append(subprocess.Popen(cmd))
    rc = 0
    pending = list(procs)
    while pending:
        pid, status = os.wait()
        done = [q for q in pending if q.pid == pid]
        if not done:
            continue
        pending.remove(done[0])
        done[0].returncode = status
        if status != 0 and rc == 0:
            rc = 1
            for q in pending:  # the others would wait for the lost rank until their timeout
                q.kill()
    return rc


if __name__ == "__main__":
    sys.exit(main())
