#!/usr/bin/env python3
"""sampler_bench.py: slurmddp.torch.DistributedSampler beside torch's, through Python.

What it measures (one rank of --replicas, shuffled, --epoch):

  epoch   One rank's whole epoch handed to Python: set_epoch(), then
          list(iter(sampler)), at --n samples (default 10**8). torch's
          torch.utils.data.DistributedSampler builds randperm(n).tolist() and
          slices it; ours (--mode, default "auto": "scalable" above 2**24
          samples) makes the indices in C++ in blocks. The indices stay alive
          until the peak RSS is read, so both peaks include the returned list
          of num_samples ints (about 36 bytes per index, e.g. ~430 MiB for
          12.5M indices).
  stream  The same epoch consumed index by index without keeping it
          (collections.deque(enumerate(iter(sampler)), maxlen=1)): what a training loop
          that only walks the indices costs. Peaks here are the sampler's own.
  loader  A torch.utils.data.DataLoader epoch (batch_size --batch-size,
          num_workers 0, default collate) over a map-style dataset whose
          __getitem__ returns the index, at --loader-n samples (default
          10**6); "auto" is "torch" mode (index for index torch's order) at
          that size. One untimed warm-up epoch precedes the timed one.

Every measurement runs in a fresh child process (this script re-run by the same
interpreter with the hidden flag --child), because ru_maxrss is a high-water
mark of the whole process. The child imports torch and slurmddp.torch, then
reads its baseline (VmHWM from /proc/self/status, i.e. the peak so far), runs
the timed region (time.perf_counter), then reads its peak (getrusage
RUSAGE_SELF ru_maxrss). Within each repetition the samplers run one after the
other (torch first in odd repetitions, ours first in even ones), so that load
changes on a shared machine hit both alike.

How to run (the package is built by `ninja -C build`; torch must be importable,
e.g. Debian's python3-torch under /usr/bin/python3):

  PYTHONPATH=build/python /usr/bin/python3 bench/python/sampler_bench.py
  ... --n 1000000000 --cases epoch,stream --repeat 5
  meson test -C build --benchmark python_sampler

Output: '#' lines (preamble, header, summary) and one row per case and sampler,
whitespace-separated:

  case sampler n replicas rank mode reps count time_s_median time_s_min
  time_s_max rss_base_mib rss_peak_mib rss_delta_mib

  case           epoch | stream | loader
  sampler        torch (torch.utils.data.DistributedSampler) | slurmddp (ours)
  n              dataset size; replicas, rank: the shard measured
  mode           the mode in effect ("torch" or "scalable"; "-" for torch's)
  reps           repetitions (fresh processes) behind the row
  count          indices (epoch, stream) or batches (loader) of one epoch
  time_s_*       wall time of the timed region, over the repetitions
  rss_base_mib   VmHWM after the imports, before the timed region (median)
  rss_peak_mib   ru_maxrss at the end of the child (max over repetitions)
  rss_delta_mib  peak - base within one child (max over repetitions)

The summary lines quote ratios ours/torch of the median times and of the
memory deltas, with the targets: epoch time <= 0.2, epoch delta <= 64 MiB,
loader time <= 1.0. Exits 1 when a child fails or the index counts of the two
samplers differ.
"""
from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

CASES = ("epoch", "stream", "loader")
SAMPLERS = ("torch", "slurmddp")
MiB = 1024.0  # KiB per MiB


# ---- child: one measurement in this process -------------------------------------------------

def _vm_kib(field: str) -> int:
    """A 'VmXxx:' line of /proc/self/status in KiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class IndexDataset:
    """A map-style dataset of n samples whose sample i is the int i."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def _make_sampler(kind: str, dataset, args: argparse.Namespace):
    if kind == "torch":
        from torch.utils.data import DistributedSampler
        return DistributedSampler(dataset, num_replicas=args.replicas, rank=args.rank,
                                  shuffle=True, seed=args.seed)
    import slurmddp.torch
    return slurmddp.torch.DistributedSampler(dataset, num_replicas=args.replicas, rank=args.rank,
                                             shuffle=True, seed=args.seed, mode=args.mode)


def run_child(case: str, kind: str, args: argparse.Namespace) -> None:
    import torch
    import slurmddp.torch  # noqa: F401
    from torch.utils.data import DataLoader

    base_kib = _vm_kib("VmHWM")
    if case in ("epoch", "stream"):
        # torch's sampler only needs len(); range() costs nothing at any n.
        sampler = _make_sampler(kind, range(args.n), args)
        sampler.set_epoch(args.epoch)
        t0 = time.perf_counter()
        if case == "epoch":
            kept = list(iter(sampler))
            count = len(kept)
        else:
            kept = None
            # enumerate counts in C; the deque keeps only the last (count, index).
            last = collections.deque(enumerate(iter(sampler), 1), maxlen=1)
            count = last[0][0] if last else 0
        elapsed = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        del kept
    else:
        dataset = IndexDataset(args.loader_n)
        sampler = _make_sampler(kind, dataset, args)
        loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
        sampler.set_epoch(args.epoch + 1)  # warm-up epoch, untimed
        for _ in loader:
            pass
        t0 = time.perf_counter()
        sampler.set_epoch(args.epoch)
        count = 0
        for _ in loader:
            count += 1
        elapsed = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mode = getattr(sampler, "mode", "-")
    print(f"result time_s={elapsed:.9f} count={count} base_kib={base_kib} peak_kib={peak_kib} "
          f"mode={mode} torch={torch.__version__}", flush=True)



# ---- parent: children, rows, summary --------------------------------------------------------

class Sample:
    def __init__(self, fields: Dict[str, str]) -> None:
        self.time_s = float(fields["time_s"])
        self.count = int(fields["count"])
        self.base_kib = int(fields["base_kib"])
        self.peak_kib = int(fields["peak_kib"])
        self.mode = fields["mode"]
        self.torch = fields["torch"]


def measure(case: str, kind: str, args: argparse.Namespace) -> Tuple[Optional[Sample], str]:
    cmd = [args.python, os.path.abspath(__file__), "--child", case, kind,
           "--n", str(args.n), "--loader-n", str(args.loader_n), "--replicas", str(args.replicas),
           "--rank", str(args.rank), "--epoch", str(args.epoch), "--seed", str(args.seed),
           "--mode", args.mode, "--batch-size", str(args.batch_size)]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:  # run() kills and reaps the child
        return None, f"timed out after {args.timeout} s"
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("result ") and p.returncode == 0:
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            return Sample(fields), ""
    tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
    return None, f"exit status {p.returncode}: {tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10**8, help="dataset size of epoch/stream")
    ap.add_argument("--loader-n", type=int, default=10**6, help="dataset size of loader")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--epoch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="auto", choices=("auto", "torch", "scalable"),
                    help="mode of our sampler")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per row")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per child")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter of the children (default: this one)")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "SAMPLER"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        run_child(args.child[0], args.child[1], args)
        return 0

    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"--cases: unknown case {c!r}; expected some of {', '.join(CASES)}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    print("# sampler_bench.py: one rank's epoch, slurmddp.torch.DistributedSampler beside "
          "torch.utils.data.DistributedSampler; fresh process per measurement")
    print(f"# python {args.python}, {os.cpu_count()} CPUs, repeat {args.repeat}, "
          f"rank {args.rank}/{args.replicas}, epoch {args.epoch}, seed {args.seed}, "
          f"our mode {args.mode}")
    print("# case sampler n replicas rank mode reps count time_s_median time_s_min time_s_max "
          "rss_base_mib rss_peak_mib rss_delta_mib", flush=True)

    failed = False
    medians: Dict[Tuple[str, str], float] = {}
    deltas: Dict[Tuple[str, str], float] = {}
    counts: Dict[Tuple[str, str], int] = {}
    for case in cases:
        n = args.loader_n if case == "loader" else args.n
        samples: Dict[str, List[Sample]] = {k: [] for k in SAMPLERS}
        errors: Dict[str, str] = {}
        for rep in range(args.repeat):
            order = SAMPLERS if rep % 2 == 0 else tuple(reversed(SAMPLERS))
            for kind in order:
                if kind in errors:
                    continue
                s, err = measure(case, kind, args)
                if s is None:
                    errors[kind] = err
                else:
                    samples[kind].append(s)
        for kind in SAMPLERS:
            if kind in errors:
                failed = True
                print(f"# {case} {kind}: FAILED: {errors[kind]}")
                print(f" {case} {kind} {n} {args.replicas} {args.rank} - 0 - - - - - - -")
                continue
            got = samples[kind]
            times = [s.time_s for s in got]
            base = statistics.median(s.base_kib for s in got) / MiB
            peak = max(s.peak_kib for s in got) / MiB
            delta = max(s.peak_kib - s.base_kib for s in got) / MiB
            mode = got[0].mode if kind == "slurmddp" else "-"
            count = got[0].count
            if any(s.count != count for s in got):
                failed = True
                print(f"# {case} {kind}: WRONG: the count differs between repetitions")
            medians[case, kind] = statistics.median(times)
            deltas[case, kind] = delta
            counts[case, kind] = count
            print(f" {case} {kind} {n} {args.replicas} {args.rank} {mode} {len(got)} {count} "
                  f"{statistics.median(times):.4f} {min(times):.4f} {max(times):.4f} "
                  f"{base:.1f} {peak:.1f} {delta:.1f}", flush=True)
        if (case, "torch") in counts and (case, "slurmddp") in counts \
                and counts[case, "torch"] != counts[case, "slurmddp"]:
            failed = True
            print(f"# {case}: WRONG: torch's sampler gave {counts[case, 'torch']}, ours "
                  f"{counts[case, 'slurmddp']}")

    targets = {"epoch": 0.2, "stream": 0.2, "loader": 1.0}
    for case in cases:
        if (case, "torch") not in medians or (case, "slurmddp") not in medians:
            continue
        ratio = medians[case, "slurmddp"] / medians[case, "torch"]
        print(f"# ratio {case} time ours/torch = {ratio:.3f} (target <= {targets[case]})")
        if case != "loader":
            d_ours, d_torch = deltas[case, "slurmddp"], deltas[case, "torch"]
            ratio_mem = d_ours / d_torch if d_torch > 0 else float("nan")
            print(f"# ratio {case} rss_delta ours/torch = {ratio_mem:.3f} "
                  f"({d_ours:.1f} MiB / {d_torch:.1f} MiB; target: ours <= 64 MiB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
