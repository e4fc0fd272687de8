#!/usr/bin/env python3
"""torch's TCPStore measured the way store_bench measures slurm-ddp's store.

N clients as threads of this process, each its own TCPStore client (one
connection), released together at a gate; each joins a barrier the way
slurmddp::store_barrier does (set its rank key, add to a counter, the last
sets "done", wait for "done"). Time: gate release to the last client done.
The master TCPStore runs in this process too, started before the clock.
Up to 1024 clients, one untimed warm-up run precedes the timed ones.

Prints one line per size: "torch <clients> <reps> <median_ms> <min_ms> <max_ms> <ok>".
torch's store slows down steeply with N, so each size repeats only until its
repetitions have taken --budget-seconds (at least one), and the sizes after
one whose single repetition took longer than that are reported as skipped:
"torch <clients> 0 - - - skipped".
Needs torch (Debian's python3-torch runs under /usr/bin/python3).
"""
import argparse
import os
import resource
import statistics
import sys
import threading
import time
from datetime import timedelta


def one_run(dist, n, timeout_s):
    master = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout_s),
                           wait_for_workers=False)
    port = master.port
    gate = threading.Event()
    exit_gate = threading.Event()  # clients hold their connection until all are done
    finished = threading.Condition()
    count = [0]
    done = [None] * n
    errors = []

    def client(rank):
        gate.wait()
        try:
            s = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=timeout_s))
            s.set(f"barrier/bench/rank/{rank}", "1")
            if s.add("barrier/bench/count", 1) == n:
                s.set("barrier/bench/done", "1")
            s.wait(["barrier/bench/done"])
            done[rank] = time.monotonic()
        except Exception as e:  # reported as a failed run
            errors.append(repr(e))
            s = None
        with finished:
            count[0] += 1
            if count[0] == n:
                finished.notify()
        exit_gate.wait()
        del s

    threads = [threading.Thread(target=client, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    gate.set()
    with finished:
        finished.wait_for(lambda: count[0] == n)
    exit_gate.set()
    for t in threads:
        t.join()
    del master
    if errors:
        return None, errors[0]
    return (max(done) - t0) * 1000.0, None


def fds_per_client(dist):
    """File descriptors one TCPStore client holds in this process (both ends
    of its connections, plus whatever else it opens)."""
    master = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30),
                           wait_for_workers=False)
    before = len(os.listdir("/proc/self/fd"))
    clients = [dist.TCPStore("127.0.0.1", master.port, None, False, timedelta(seconds=30))
               for _ in range(8)]
    per = (len(os.listdir("/proc/self/fd")) - before + 7) // 8
    del clients, master
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", required=True, help="comma-separated client counts")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget-seconds", type=float, default=30.0,
                    help="time budget of the repetitions of one size")
    ap.add_argument("--timeout-seconds", type=float, default=300.0)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threading.stack_size(512 * 1024)
    per_client = fds_per_client(dist)
    print(f"# torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"RLIMIT_NOFILE {hard}, {per_client} file descriptors per TCPStore client", flush=True)

    too_slow = False
    for n in (int(c) for c in args.clients.split(",")):
        if too_slow:
            print(f"torch {n} 0 - - - skipped", flush=True)
            continue
        if per_client * n + 64 > hard:
            print(f"# torch {n}: needs about {per_client * n + 64} file descriptors in one "
                  f"process, RLIMIT_NOFILE is {hard}", flush=True)
            print(f"torch {n} 0 - - - skipped", flush=True)
            continue
        times = []
        ok = "yes"
        if n <= 1024:  # warm-up, untimed (larger sizes take too long to spend one on it)
            one_run(dist, n, args.timeout_seconds)
        for _ in range(args.reps):
            ms, err = one_run(dist, n, args.timeout_seconds)
            if ms is None:
                ok = "no"
                print(f"# torch {n}: {err}", flush=True)
                break
            times.append(ms)
            if ms > args.budget_seconds * 1000.0:
                too_slow = True
            if sum(times) > args.budget_seconds * 1000.0:
                break
        if not times:
            print(f"torch {n} 0 - - - {ok}", flush=True)
            continue
        print(f"torch {n} {len(times)} {statistics.median(times):.2f} {min(times):.2f} "
              f"{max(times):.2f} {ok}", flush=True)


if __name__ == "__main__":
    main()
