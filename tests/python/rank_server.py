"""The fork server behind support.start_ranks: a python that imports torch once
and forks each rank from there, so that a test's ranks do not each pay for
importing it again (1.3-1.5 s of CPU for torch 2.15, the most of what a short
rank costs).

  rank_server.py FD MODULE...

imports the MODULEs, says {"ready": ...} on the SOCK_SEQPACKET socket FD and
then answers each request (a JSON object with argv, env and cwd, and the
rank's stdin, stdout and stderr as three descriptors) with {"pid": N}: N runs
argv[1] (a script; argv[0] is the python) with argv[2:], that environment
and directory, as `python script args` would, but started by two forks, so
that it is the test's child (the test is a child subreaper; support.py
waits for it as for a subprocess.Popen). It ends when the test closes the
socket."""
import faulthandler
import importlib
import io
import json
import os
import runpy
import signal
import socket
import sys
import threading
import traceback
import warnings


def main():
    # numpy's OpenBLAS starts its threads on import; it forks safely (its
    # at-fork handlers), as torch's DataLoader workers rely on. Python 3.12
    # warns of every fork of a process with threads.
    warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                            category=DeprecationWarning)
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        for name in sys.argv[2:]:
            importlib.import_module(name)
    except Exception as e:  # the test starts its ranks as processes then
        sock.send(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        return
    sock.send(json.dumps({"ready": sys.argv[2:]}).encode())
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        if not msg:
            return  # the test ended
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": f"{len(fds)} descriptors, not 3"}).encode())
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        middle = os.fork()
        if middle == 0:  # exits at once, so that the rank is handed to the test
            os.close(r)
            rank = os.fork()
            if rank == 0:
                os.close(w)
                sock.close()
                become_rank(json.loads(msg), fds)
            os.write(w, str(rank).encode())
            os._exit(0)
        os.close(w)
        for fd in fds:
            os.close(fd)
        pid = os.read(r, 64).decode()
        os.close(r)
        os.waitpid(middle, 0)
        sock.send(json.dumps({"pid": int(pid)} if pid else {"error": "fork failed"}).encode())


def become_rank(req, fds):
    """Never returns: runs the script as `python script args` would, in the
    environment, directory and standard streams of the request, and exits
    with its status."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    if req.get("cwd"):
        os.chdir(req["cwd"])
    script = req["argv"][1]
    sys.argv = req["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    # The streams as a new python makes them: stdout block-buffered on a pipe
    # (unless PYTHONUNBUFFERED), stderr line-buffered.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False))
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), line_buffering=os.isatty(1),
                                  write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), line_buffering=True,
                                  errors="backslashreplace", write_through=unbuffered)
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable(file=sys.stderr, all_threads=True)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = exit_code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as python does: ends by the signal
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finish()
    os._exit(code)


def exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def finish():
    """What a python does on its way out: waits for the threads that are not
    daemons, runs the atexit functions, flushes the streams."""
    try:
        threading._shutdown()
    except Exception:
        traceback.print_exc()
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


if __name__ == "__main__":
    main()
