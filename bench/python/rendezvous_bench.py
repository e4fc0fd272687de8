#!/usr/bin/env python3
"""rendezvous_bench.py: torch.distributed's rendezvous, "env://" beside "slurmddp://".

What it measures: dist.init_process_group(backend="gloo", init_method=M)
followed by dist.barrier(), at --ranks processes (default 32) on this one
machine over loopback, for M = "env://" (torch's own TCPStore on rank 0) and
M = "slurmddp://" (slurm-ddp's authenticated store on rank 0, registered by
`import slurmddp.torch`), side by side in one run.

How each run goes: the parent starts --ranks children (this script re-run by
the same interpreter with the hidden flag --child) with the environment of one
rank each: MASTER_ADDR=127.0.0.1, MASTER_PORT=a free loopback port (new per
run), RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GLOO_SOCKET_IFNAME=lo,
and for slurmddp:// a random SLURMDDP_TOKEN (Slurm, PMIx and slurm-ddp plugin
variables of the parent's environment are removed). Each child imports torch
and slurmddp.torch first (seconds per process, staggered on a small machine),
prints "ready" and blocks reading stdin; once every rank is ready the parent
writes "go" to all of them at once. Only then does each child start its clock
(time.perf_counter), runs init_process_group + barrier, prints its duration,
and calls destroy_process_group. The methods alternate within each repetition
(env:// first in odd repetitions, slurmddp:// first in even ones).

A run that does not finish within --timeout seconds after "go" (or whose
ranks are not ready within --start-timeout seconds) is killed; its row says
so. Every child is reaped before the next run starts.

How to run (the package is built by `ninja -C build`; torch must be importable,
e.g. Debian's python3-torch under /usr/bin/python3):

  PYTHONPATH=build/python /usr/bin/python3 bench/python/rendezvous_bench.py
  ... --ranks 64 --repeat 5
  meson test -C build --benchmark python_rendezvous

Output: '#' lines (preamble, header, summary) and one row per run,
whitespace-separated:

  init_method ranks repeat max_s median_s min_s status

  init_method  env:// or slurmddp://
  ranks        processes in the group
  repeat       1-based repetition
  max_s        slowest rank's init_process_group + barrier: the time until the
               last rank finished, counted from "go" (every rank starts its
               clock when it reads "go")
  median_s     median over the ranks; min_s: the fastest rank
  status       ok | timeout(<finished>/<ranks>) | failed(rank <r>: <last stderr line>)

The summary quotes, per method, the median over repetitions of max_s, and the
ratio slurmddp/env of those medians (target: <= 1.0). Exits 1 when a run
failed or timed out.
"""
from __future__ import annotations

import argparse
import os
import queue
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from typing import Dict, List, Optional, Tuple

METHODS = ("env://", "slurmddp://")
# Variables of the parent's environment that would change how a child finds
# its identity or its store (a Slurm step, PMIx, slurm-ddp's plugin, torchrun).
STRIPPED_PREFIXES = ("SLURM_", "SLURMD_", "SLURMDDP_", "PMIX_", "PMI_", "OMPI_",
                     "TORCHELASTIC_", "GROUP_", "ROLE_")
STRIPPED = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
            "MASTER_PORT", "GLOO_SOCKET_IFNAME"}


# ---- child: one rank -----------------------------------------------------------------------

def run_child(method: str, timeout_s: float) -> int:
    import torch.distributed as dist
    import slurmddp.torch  # noqa: F401  (registers slurmddp://)

    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 3  # the parent went away
    t0 = time.perf_counter()
    dist.init_process_group(backend="gloo", init_method=method,
                            timeout=timedelta(seconds=timeout_s))
    dist.barrier()
    elapsed = time.perf_counter() - t0
    print(f"time {elapsed:.9f}", flush=True)
    dist.destroy_process_group()
    return 0


# ---- parent: runs, rows, summary -----------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_environment() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in STRIPPED and not k.startswith(STRIPPED_PREFIXES)}


def _read_lines(rank: int, stream, out: "queue.Queue[Tuple[int, Optional[str]]]") -> None:
    for line in stream:
        out.put((rank, line.strip()))
    out.put((rank, None))  # end of output


def _stderr_tail(f) -> str:
    f.seek(0)
    lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(no output)"


def one_run(method: str, args: argparse.Namespace) -> Tuple[List[float], str]:
    """Times one group of args.ranks processes; returns the ranks' durations and a status."""
    n = args.ranks
    env = base_environment()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(n),
               LOCAL_WORLD_SIZE=str(n), GLOO_SOCKET_IFNAME="lo")
    if method == "slurmddp://":
        env["SLURMDDP_TOKEN"] = secrets.token_hex(32)
    cmd = [args.python, os.path.abspath(__file__), "--child", method,
           "--timeout", str(args.timeout)]
    lines: "queue.Queue[Tuple[int, Optional[str]]]" = queue.Queue()
    procs: List[subprocess.Popen] = []
    errs = []
    threads = []
    times: Dict[int, float] = {}
    status = "ok"
    try:
        for r in range(n):
            errs.append(tempfile.TemporaryFile())
            procs.append(subprocess.Popen(
                cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errs[r], text=True))
            t = threading.Thread(target=_read_lines, args=(r, procs[r].stdout, lines),
                                 daemon=True)
            t.start()
            threads.append(t)

        def collect(expect: str, deadline: float) -> Tuple[int, Optional[int]]:
            """Lines starting with expect until every rank sent one; (count, rank that died)."""
            sent = set()
            while len(sent) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    r, line = lines.get(timeout=left)
                except queue.Empty:
                    break
                if line is None:
                    if r in sent:
                        continue  # done and exited (its "time" came first)
                    return len(sent), r
                if line.startswith(expect):
                    sent.add(r)
                    if expect == "time":
                        times[r] = float(line.split()[1])
            return len(sent), None

        ready, dead = collect("ready", time.monotonic() + args.start_timeout)
        if ready < n:
            if dead is not None:
                procs[dead].wait()
                return [], f"failed(rank {dead}: {_stderr_tail(errs[dead])})"
            return [], f"start_timeout({ready}/{n})"
        for p in procs:  # release every rank at once, then close their stdin
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            p.stdin.close()
        done, dead = collect("time", time.monotonic() + args.timeout)
        if done < n:
            if dead is not None:
                procs[dead].wait()
                status = f"failed(rank {dead}: {_stderr_tail(errs[dead])})"
            else:
                status = f"timeout({done}/{n})"
        else:
            # destroy_process_group and exit; rank 0 lingers while the others disconnect.
            deadline = time.monotonic() + args.timeout
            for r, p in enumerate(procs):
                try:
                    rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    status = f"timeout(rank {r} did not exit)"
                    break
                if rc != 0:
                    status = f"failed(rank {r}: exit status {rc}: {_stderr_tail(errs[r])})"
                    break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
            for s in (p.stdin, p.stdout):
                if s is not None and not s.closed:
                    try:
                        s.close()
                    except OSError:
                        pass
        for t in threads:
            t.join(timeout=5)
        for f in errs:
            f.close()
    return [times[r] for r in sorted(times)], status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="runs per method")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds after 'go' before a run is killed (also init_process_group's)")
    ap.add_argument("--start-timeout", type=float, default=600,
                    help="seconds for every rank to import torch and report ready")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter of the ranks (default: this one)")
    ap.add_argument("--child", metavar="INIT_METHOD", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        return run_child(args.child, args.timeout)

    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            ap.error(f"--methods: unknown init_method {m!r}; expected some of "
                     f"{', '.join(METHODS)}")
    if args.ranks < 1 or args.repeat < 1:
        ap.error("--ranks and --repeat must be at least 1")

    print("# rendezvous_bench.py: init_process_group(backend='gloo') + barrier, "
          "env:// beside slurmddp://, timed from a common 'go' after every rank imported torch")
    print(f"# python {args.python}, {os.cpu_count()} CPUs, ranks {args.ranks} on 127.0.0.1, "
          f"repeat {args.repeat}, timeout {args.timeout:g} s")
    print("# init_method ranks repeat max_s median_s min_s status", flush=True)

    failed = False
    maxima: Dict[str, List[float]] = {m: [] for m in methods}
    for rep in range(1, args.repeat + 1):
        order = methods if rep % 2 == 1 else list(reversed(methods))
        for method in order:
            times, status = one_run(method, args)
            if status == "ok":
                maxima[method].append(max(times))
                print(f" {method} {args.ranks} {rep} {max(times):.4f} "
                      f"{statistics.median(times):.4f} {min(times):.4f} {status}", flush=True)
            else:
                failed = True
                print(f" {method} {args.ranks} {rep} - - - {status}", flush=True)

    med: Dict[str, float] = {}
    for m in methods:
        if maxima[m]:
            med[m] = statistics.median(maxima[m])
            print(f"# {m} ranks {args.ranks}: median over {len(maxima[m])} runs of max_s = "
                  f"{med[m]:.4f} (min {min(maxima[m]):.4f}, max {max(maxima[m]):.4f})")
    if "env://" in med and "slurmddp://" in med:
        print(f"# ratio slurmddp/env = {med['slurmddp://'] / med['env://']:.3f} (target <= 1.0)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
