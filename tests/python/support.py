"""Shared by the Python tests: the torch gate, free ports, and ranks as
child processes with the environment slurm-ddp's plugin would export."""
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

SKIP = 77  # meson's exit code for a skipped test


# Note [The Python under test] (tests/system/cluster.cpp): with
# SLURMDDP_TEST_PYTHON set (the PyPI lane: a venv with the newest torch and
# slurm-ddp pip-installed from the checkout), a test started by meson with the
# build's interpreter runs itself again under that one, without the build's
# package on PYTHONPATH (SLURMDDP_BUILD_PYTHONPATH names it), so that the
# package the test imports is the pip-installed one; the ranks it starts use
# sys.executable and inherit the environment.
def _run_under_the_python_under_test():
    want = os.environ.get("SLURMDDP_TEST_PYTHON", "")
    if not want or os.path.abspath(sys.executable) == os.path.abspath(want):
        return
    build = os.path.realpath(os.environ.get("SLURMDDP_BUILD_PYTHONPATH", "") or "/nonexistent")
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != build]
    os.environ["PYTHONPATH"] = os.pathsep.join(path)
    sys.stdout.flush()
    os.execv(want, [want, *sys.argv])


_run_under_the_python_under_test()


def require_torch():
    """Imports torch; without it, skips (exit 77, saying why) unless CI=true or
    SLURMDDP_TORCH_TESTS=required, where it fails."""
    try:
        import torch
    except ImportError as e:
        required = os.environ.get("CI") == "true" or \
            os.environ.get("SLURMDDP_TORCH_TESTS") == "required"
        print(f"{'FAIL' if required else 'SKIP'}: torch cannot be imported by {sys.executable} "
              f"({e}); install Debian's python3-torch", file=sys.stderr)
        sys.exit(1 if required else SKIP)
    import slurmddp
    where = os.path.dirname(os.path.realpath(slurmddp.__file__))
    build = os.environ.get("SLURMDDP_BUILD_PYTHONPATH", "")
    if os.environ.get("SLURMDDP_TEST_PYTHON") and build and \
            where.startswith(os.path.realpath(build) + os.sep):
        print(f"FAIL: SLURMDDP_TEST_PYTHON={sys.executable} imports slurmddp from the build tree "
              f"({where}), not its own install", file=sys.stderr)
        sys.exit(1)
    print(f"python {sys.executable}: torch {torch.__version__}, slurmddp {slurmddp.__version__} "
          f"from {where}", file=sys.stderr)


def torch_store_client(host, port, world, timeout):
    """torch's own TCPStore client, on every torch. From 2.4 torch asks for its
    libuv backend by default, which Debian's torch 2.6 is built without: the
    constructor then raises ('use_libuv was requested but PyTorch was build
    without libuv support') before it connects. The client speaks the same
    protocol either way, so a stranger test asks for the classic one."""
    import torch.distributed as dist
    try:
        return dist.TCPStore(host, port, world, False, timeout=timeout, use_libuv=False)
    except TypeError:  # torch before 2.2 has no use_libuv argument (and no libuv backend)
        return dist.TCPStore(host, port, world, False, timeout=timeout)


def free_port():
    """A loopback port nobody listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, token="5eed" * 8, **extra):
    """The variables the plugin gives task `rank` of a one-node step."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("SLURM", "SLURMDDP_", "PMIX", "TORCHELASTIC")):
            del env[k]
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "GLOO_SOCKET_IFNAME": "lo",
    })
    env["PYTHONFAULTHANDLER"] = "1"  # a rank that hangs shows its stacks (stop_hung)
    if token is not None:
        env["SLURMDDP_TOKEN"] = token
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_ranks(script, ranks, world, port, args=(), stderr_dir=None, **env_extra):
    """Starts `script` (a file next to this one) as the given ranks; returns
    {rank: Popen} with stdin/stdout/stderr pipes. With `stderr_dir`, rank r's
    stderr goes to <stderr_dir>/rank<r>.err instead (to read while the ranks
    run) and its stdout is dropped."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs = {}
    for r in ranks:
        out = err = subprocess.PIPE
        if stderr_dir is not None:
            out, err = subprocess.DEVNULL, open(os.path.join(stderr_dir, f"rank{r}.err"), "w")
        try:
            procs[r] = subprocess.Popen(
                [sys.executable, os.path.join(here, script), *map(str, args)],
                env=rank_env(r, world, port, **env_extra), stdin=subprocess.PIPE,
                stdout=out, stderr=err, text=True)
        finally:
            if stderr_dir is not None:
                err.close()  # the child has its own descriptor
    return procs


def threads_of(pid):
    """Each thread of `pid` as 'tid name state wait-channel', for a rank that hangs."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return "(gone)"
    for tid in tids:
        try:
            base = f"/proc/{pid}/task/{tid}/"
            with open(base + "comm") as f:
                name = f.read().strip()
            with open(base + "stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(base + "wchan") as f:
                wchan = f.read().strip()
            lines.append(f"{tid} {name} {state} {wchan}")
        except OSError:
            continue
    return "; ".join(lines)


def stop_hung(procs, grace=5):
    """Ends the ranks still running, saying where they were: their threads'
    states, then SIGABRT, on which each prints every thread's Python stack
    (PYTHONFAULTHANDLER, set by rank_env) before it dies; SIGKILL after
    `grace` s. Returns {rank: threads} of those it found running."""
    found = {}
    for r, p in procs.items():
        if p.poll() is None:
            found[r] = threads_of(p.pid)
            p.send_signal(signal.SIGABRT)
    deadline = time.monotonic() + grace
    for r in found:
        try:
            procs[r].wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            procs[r].kill()
            procs[r].wait()
    return found


def finish(procs, timeout=120):
    """Waits for every rank (after `timeout` s, stops the ones still running
    with stop_hung); returns {rank: (returncode, stdout, stderr)}."""
    out = {}
    hung = {}
    deadline = time.monotonic() + timeout
    for r, p in procs.items():
        try:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.update(stop_hung(procs))
            o, e = p.communicate()
        if r in hung:
            e += f"\n[test: rank {r} still running after {timeout} s; threads: {hung[r]}]"
        out[r] = (p.returncode, o, e)
    return out


def main():
    require_torch()
    unittest.main(verbosity=2)
