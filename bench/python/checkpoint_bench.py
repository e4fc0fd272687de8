#!/usr/bin/env python3
"""checkpoint_bench.py: what slurmddp.Checkpointer's save and load cost beside
plain torch.save/torch.load to a file, in time and in peak memory.

What it measures: one rank (world size 1, torch's Gloo group over a file store)
saving and loading a state of --bytes bytes: a dict of --tensors float32 CPU
tensors of equal size. Each operation runs in a process of its own, so that
its peak resident set (ru_maxrss from wait4) is its own; it includes the state
itself (--bytes, for save and after load) and torch's import (a few hundred
MB). The implementations:

  torch      torch.save(state, path) / torch.load(path) (no fsync, no checksum)
  slurmddp   Checkpointer.save(step, state) / Checkpointer.load_latest(): the
             rank file streamed through its checksum into a private temporary
             file, fsynced and renamed; at load its checksum verified in one
             pass, then torch.load reading the payload from the file (Note
             [Streaming checkpoints])
  peer       (load only) what another rank does at load_latest() with the
             default scope="rank0": the structure of rank 0's file checked
             (no checksum: rank 0 verifies it), then torch.load through the
             window onto it, of the file slurmddp's save wrote
  inmemory   the path Checkpointer took before streaming, with the same
             extension: torch.save into a BytesIO, encode_checkpoint,
             write_atomic / read_checkpoint (whole file, decoded), torch.load
             of a BytesIO of the payload

Every load reads what the save of the same implementation and repetition
wrote, from the page cache (the file was just written; dropping the caches
would disturb the machine's other work). load passes weights_only=False to
torch.load and Checkpointer(weights_only=False): the state is tensors only,
and what is measured is the reading, not the unpickler's checks.

Columns (one row per operation and repetition with --rows, then one per
operation with the median over --reps repetitions; times in seconds):
  what bytes seconds peak_rss_bytes
where `what` is <implementation>_<save|load>.

How to run (the package built by `ninja -C build`; torch importable; ~3x
--bytes of free disk and, for inmemory, ~6x --bytes of free memory):

  PYTHONPATH=build/python /usr/bin/python3 bench/python/checkpoint_bench.py --bytes 2e9 --reps 3
"""
import argparse
import datetime
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

IMPLS = ("torch", "slurmddp", "peer", "inmemory")


def state_of(nbytes, tensors):
    import torch
    n = max(1, int(nbytes) // 4 // tensors)
    return {f"t{i}": torch.full((n,), float(i), dtype=torch.float32) for i in range(tensors)}


def check(state, nbytes, tensors):
    n = max(1, int(nbytes) // 4 // tensors)
    for i in range(tensors):
        t = state[f"t{i}"]
        if t.numel() != n or float(t[0]) != float(i) or float(t[-1]) != float(i):
            raise SystemExit(f"checkpoint_bench: tensor t{i} came back wrong")


def child(args):
    import torch
    import torch.distributed as dist

    import slurmddp
    from slurmddp import _core

    impl, op, where = args.child
    ckpt = None
    if impl == "slurmddp":
        # a file store: a port chosen beforehand could be taken by then
        # (absolute: "file://" followed by a relative path names a host, not a file)
        store = os.path.abspath(tempfile.mkdtemp(prefix=".store-", dir=where))
        dist.init_process_group("gloo", init_method="file://" + os.path.join(store, "s"),
                                rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
        ckpt = slurmddp.Checkpointer(where, per_job=False, keep=1, weights_only=False)
    state = state_of(args.bytes, args.tensors) if op == "save" else None
    t0 = time.perf_counter()
    if impl == "torch" and op == "save":
        torch.save(state, os.path.join(where, "state.pt"))
    elif impl == "torch":
        state = torch.load(os.path.join(where, "state.pt"), weights_only=False)
    elif impl == "slurmddp" and op == "save":
        ckpt.save(1, state)
    elif impl == "slurmddp":
        state = ckpt.load_latest().state
    elif impl == "peer":
        from slurmddp._checkpoint import _PayloadWindow
        f = _core.CheckpointFile(os.path.join(where, "step-1", "rank-0.ckpt"), False)
        with _PayloadWindow(f, f.payload_offset, f.payload_bytes) as window:
            state = torch.load(window, weights_only=False)
    elif op == "save":
        buf = io.BytesIO()
        torch.save(state, buf)
        data = _core.encode_checkpoint(1, 0, 1, "", buf.getbuffer())
        del buf
        _core.write_atomic(where, "rank-0.ckpt", data)
        del data
    else:
        payload = _core.read_checkpoint(os.path.join(where, "rank-0.ckpt"))[4]
        state = torch.load(io.BytesIO(payload), weights_only=False)
    seconds = time.perf_counter() - t0
    check(state, args.bytes, args.tensors)
    if ckpt is not None:
        dist.destroy_process_group()
    print(f"{seconds:.6f}", flush=True)


def run_child(args, impl, op, where):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "SLURMDDP_", "PMIX", "TORCHELASTIC"))}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", GLOO_SOCKET_IFNAME="lo")
    p = subprocess.Popen([sys.executable, __file__, "--bytes", str(args.bytes), "--tensors",
                          str(args.tensors), "--child", impl, op, where],
                         env=env, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"checkpoint_bench: {impl} {op} exited with {p.returncode}")
    return float(out.split()[-1]), usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=float, default=2e9)
    ap.add_argument("--tensors", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--dir", default=None, help="where the files go (default: a temporary "
                    "directory beside the current one)")
    ap.add_argument("--rows", action="store_true", help="print every repetition's rows too")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    import torch
    impls = [i for i in args.impls.split(",") if i]
    unknown = set(impls) - set(IMPLS)
    if unknown:
        raise SystemExit(f"checkpoint_bench: --impls={args.impls}: unknown {sorted(unknown)}; "
                         f"expected some of {','.join(IMPLS)}")
    top = tempfile.mkdtemp(prefix="checkpoint-bench-", dir=args.dir or ".")
    state_bytes = max(1, int(args.bytes) // 4 // args.tensors) * 4 * args.tensors
    print(f"# checkpoint_bench: torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, state {state_bytes} bytes in {args.tensors} float32 "
          f"tensors, {args.reps} reps, files in {top}")
    rows = {}
    try:
        for rep in range(args.reps):
            order = impls[rep % len(impls):] + impls[:rep % len(impls)]
            for op in ("save", "load"):
                for impl in order:
                    if impl == "peer" and (op == "save" or "slurmddp" not in impls):
                        continue
                    where = os.path.join(top, f"{'slurmddp' if impl == 'peer' else impl}-{rep}")
                    os.makedirs(where, exist_ok=True)
                    seconds, rss = run_child(args, impl, op, where)
                    rows.setdefault(f"{impl}_{op}", []).append((seconds, rss))
                    if args.rows:
                        print(f"# rep {rep} {impl}_{op} {state_bytes} {seconds:.3f} {rss}",
                              flush=True)
            for impl in impls:
                shutil.rmtree(os.path.join(top, f"{impl}-{rep}"), ignore_errors=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("what bytes seconds peak_rss_bytes")
    for what, got in rows.items():
        print(f"{what} {state_bytes} {statistics.median(s for s, _ in got):.3f} "
              f"{int(statistics.median(r for _, r in got))}")


if __name__ == "__main__":
    main()
