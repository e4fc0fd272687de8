"""Shared by the Python tests: the torch gate, free ports, and ranks as
child processes with the environment slurm-ddp's plugin would export."""
import atexit
import json
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


def start_ranks(script, ranks, world, port, args=(), stderr_dir=None, fresh=False, **env_extra):
    """Starts `script` (a file next to this one) as the given ranks; returns
    {rank: process} with stdin/stdout/stderr pipes, each process a
    subprocess.Popen or a ForkedRank (the same methods). With `stderr_dir`,
    rank r's stderr goes to <stderr_dir>/rank<r>.err instead (to read while the
    ranks run) and its stdout is dropped. Ranks are forked from a python that
    imported torch once (Note [Forked ranks]) unless `fresh` is true or
    SLURMDDP_TEST_FRESH_RANKS=1: then each is a new python."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs = {}
    for r in ranks:
        out = err = subprocess.PIPE
        if stderr_dir is not None:
            out, err = subprocess.DEVNULL, open(os.path.join(stderr_dir, f"rank{r}.err"), "w")
        try:
            procs[r] = spawn([sys.executable, os.path.join(here, script), *map(str, args)],
                             rank_env(r, world, port, **env_extra), stdout=out, stderr=err,
                             fresh=fresh)
        finally:
            if stderr_dir is not None:
                err.close()  # the child has its own descriptor
    return procs


def spawn(argv, env, cwd=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, fresh=False):
    """A rank: `argv` (a python, a script, its arguments) with `env` in `cwd`,
    stdin a pipe, stdout and stderr as subprocess.Popen takes them (text
    mode); forked from the fork server (Note [Forked ranks]) unless `fresh`
    or SLURMDDP_TEST_FRESH_RANKS=1."""
    server = None if fresh or os.environ.get("SLURMDDP_TEST_FRESH_RANKS") == "1" else _rank_server()
    if server is not None:
        return server.start(argv, env, cwd, stdout, stderr)
    return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=stdout,
                            stderr=stderr, text=True)


# Note [Forked ranks]
#   A loopback test starts a few to a few dozen ranks, and each new python
#   imports torch again: 1.3-1.5 s of CPU for torch 2.15 from PyPI, most of
#   what a short rank costs, and most of the Python suites' time in CI. So
#   the ranks are forked from one python per test that imported torch once
#   (rank_server.py): the rank runs its script as `python script args` would,
#   with its own environment, streams and exit status, and is the test's
#   child (the test is a child subreaper, and the server forks twice), so it
#   is waited for, signalled and killed as a subprocess.Popen is. slurm-ddp's
#   package is not imported before the fork: each rank imports it itself, as
#   a user's script does. A test of what happens before or while a python
#   imports torch passes fresh=True.
_PR_SET_CHILD_SUBREAPER = 36
_server = None


def _rank_server():
    """The fork server of this test, started on first use; None (and why, on
    stderr) where it cannot run, and the ranks are new pythons."""
    global _server
    if _server is None:
        try:
            _server = _RankServer()
        except OSError as e:
            print(f"support: ranks start as new pythons: no fork server ({e})", file=sys.stderr)
            _server = False
    return _server or None


class _RankServer:
    def __init__(self):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(here, "rank_server.py"), str(theirs.fileno()),
             "torch", "torch.distributed"],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.sock.settimeout(120)
        reply = self._reply()
        if "ready" not in reply:
            raise OSError(f"rank_server.py: {reply.get('error', reply)}")
        atexit.register(self.close)

    def _reply(self):
        msg = self.sock.recv(1 << 16)
        if not msg:
            raise OSError(f"rank_server.py ended (exit {self.proc.wait()})")
        return json.loads(msg)

    def start(self, argv, env, cwd, stdout, stderr):
        """A rank running argv with env in cwd; stdout and stderr are
        subprocess.PIPE, subprocess.DEVNULL or a file."""
        mine, theirs, close = {}, [], []
        for name, how in (("stdin", subprocess.PIPE), ("stdout", stdout), ("stderr", stderr)):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                if name == "stdin":
                    mine[name] = os.fdopen(w, "w")
                    theirs.append(r)
                else:
                    mine[name] = os.fdopen(r, "r")
                    theirs.append(w)
                close.append(theirs[-1])
            elif how == subprocess.DEVNULL:
                theirs.append(os.open(os.devnull, os.O_RDWR))
                close.append(theirs[-1])
            else:
                theirs.append(how.fileno())
        try:
            request = {"argv": argv, "env": env, "cwd": cwd}
            socket.send_fds(self.sock, [json.dumps(request).encode()], theirs)
            reply = self._reply()
        finally:
            for fd in close:
                os.close(fd)
        if "pid" not in reply:
            raise OSError(f"rank_server.py could not start {argv}: {reply.get('error', reply)}")
        return ForkedRank(reply["pid"], argv, **mine)

    def close(self):
        self.sock.close()  # the server's end of file
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedRank:
    """A rank the fork server started, which is this process's child: what
    the tests use of subprocess.Popen (text mode), with its semantics."""

    def __init__(self, pid, args, stdin=None, stdout=None, stderr=None):
        self.pid, self.args = pid, args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode = None
        self._read = {}  # stream -> bytes read so far by communicate()

    def __del__(self):  # its pipes with it, as a Popen's go when no one holds them
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except OSError:
                    pass

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is not None:
            return self.returncode
        if timeout is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            delay = min(delay * 2, left, 0.05)
            time.sleep(delay)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout=None):
        """Writes `input`, closes stdin, reads stdout and stderr to their end
        and waits, within `timeout` (subprocess.TimeoutExpired: call again to
        go on); returns (stdout, stderr), None for a stream not piped."""
        import selectors
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None and not self.stdin.closed:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        with selectors.DefaultSelector() as sel:
            for stream in (self.stdout, self.stderr):
                if stream is not None and not stream.closed:
                    self._read.setdefault(stream, [])
                    sel.register(stream, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 32768)
                    if data:
                        self._read[key.fileobj].append(data)
                    else:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
        self.wait(None if deadline is None else max(0, deadline - time.monotonic()))

        def text(stream):
            if stream is None:
                return None
            data = b"".join(self._read.get(stream, []))
            return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        return text(self.stdout), text(self.stderr)


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
