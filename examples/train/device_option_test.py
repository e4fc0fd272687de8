#!/usr/bin/env python3
"""train's --device option, as one rank on this machine.

usage: device_option_test.py unit|gpu TRAIN HAVE_CUDA(0|1)

Note [Device option test]
unit (runs anywhere): SLURMDDP_BACKEND=gloo gives a host communicator whether
or not a GPU exists, so --device=cuda must fail the same way everywhere: before
any data is loaded, with one message that names the option, the communicator's
backend, CUDA_VISIBLE_DEVICES and SLURMDDP_BACKEND, and why (the communicator
is on the host; or, in a build without CUDA, that the build has none).
--device=cpu must win over SLURMDDP_BACKEND=nccl and print today's lines with
" device=cpu" appended.
gpu (skips, exit 77, without a GPU or the dataset): the GPU path against the
CPU path. With --lr=0 both must dump bitwise identical parameters (same
initialization, nothing moved); after 20 steps they may differ only by float32
summation order (cuBLAS vs the CPU loops), within the tolerance of Note
[Equivalence tolerance] in tests/system/train_test.cpp.
"""
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile

# idx.h's kDefaultDataDir, unless SLURMDDP_TRAIN_DATA names another copy
# (scripts/gpu-check unpacks one on machines without the Debian package).
DATA = os.environ.get("SLURMDDP_TRAIN_DATA") or "/usr/share/datasets/fashion-mnist"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(train, args, backend=None):
    # A fresh single-rank environment: nothing of an enclosing Slurm job,
    # plugin step or PMIx server may reach the identity.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
           if k in os.environ}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), SLURMDDP_TIMEOUT="20s",
               GLOO_SOCKET_IFNAME="lo")
    if backend is not None:
        env["SLURMDDP_BACKEND"] = backend
    return subprocess.run([train] + args, env=env, capture_output=True, text=True, timeout=90)


failures = []


def expect(ok, what, r):
    if not ok:
        failures.append(f"{what}\n--- rc {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}")


def have_data():
    return os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def unit(train, have_cuda):
    r = run(train, ["--device=gpu"], "gloo")
    expect(r.returncode != 0 and
           "train: invalid option '--device=gpu': expected one of auto, cpu, cuda" in r.stderr,
           "--device=gpu: expected a usage error naming the accepted values", r)

    r = run(train, ["--device=cuda", "--steps=1"], "gloo")
    expect(r.returncode != 0, "--device=cuda with Gloo: expected a non-zero exit", r)
    expect("train: failed to use --device=cuda: " in r.stderr,
           "--device=cuda with Gloo: expected the message to name the option", r)
    cause = ("the process group's communicator is gloo on the host" if have_cuda else
             "this build of train has no CUDA")
    expect(cause in r.stderr, f"--device=cuda with Gloo: expected the cause '{cause}'", r)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    for part in ["backend=gloo", "SLURMDDP_BACKEND='gloo'", "rank=0",
                 f"CUDA_VISIBLE_DEVICES='{visible}'" if visible is not None else
                 "CUDA_VISIBLE_DEVICES=<unset>"]:
        expect(part in r.stderr, f"--device=cuda with Gloo: expected '{part}' in the message", r)
    expect("rank 0/1" not in r.stdout, "--device=cuda with Gloo: failed after the rank line", r)

    if not have_data():
        print(f"SKIP --device=cpu: no dataset in {DATA} (Debian package dataset-fashion-mnist)")
    else:
        r = run(train, ["--device=cpu", "--steps=1", "--hidden=16", f"--data={DATA}"], "nccl")
        expect(r.returncode == 0, "--device=cpu with SLURMDDP_BACKEND=nccl: expected success", r)
        for pattern in [
                r"^rank 0/1 on \S+: MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=\d+ LOCAL_RANK=0/1 "
                r"NODE_RANK=0 backend=gloo device=cpu$",
                r"^epoch 1: loss \d+\.\d{4} test accuracy \d+\.\d{2}% \(\d+/10000\) \d+ samples/s$",
                r"^rank 0: 1 steps, parameter checksum [0-9a-f]{16}$"]:
            expect(re.search(pattern, r.stdout, re.M),
                   f"--device=cpu: expected a line matching {pattern}", r)



def floats(path):
    with open(path, "rb") as f:
        b = f.read()
    return struct.unpack(f"{len(b) // 4}f", b)


def gpu(train):
    common = ["--hidden=64", "--seed=7"]
    with tempfile.TemporaryDirectory() as d:
        dumps = {}
        for name, args in [("init", ["--steps=1", "--lr=0", "--batch-size=8"]),
                           ("trained", ["--steps=20", "--lr=0.05", "--batch-size=64"])]:
            for device in ("cuda", "cpu"):
                path = os.path.join(d, f"{name}-{device}.bin")
                # The GPU run asks for NCCL outright: without a device init() says
                # why, and only "there is no device" may skip; any other CUDA
                # failure (a broken driver, a bad ordinal) fails the test.
                r = run(train, [f"--device={device}", f"--dump-params={path}", f"--data={DATA}"] +
                        common + args, "nccl" if device == "cuda" else None)
                no_device = "cudaErrorNoDevice" in r.stderr or (
                    "cudaErrorInsufficientDriver" in r.stderr and not os.path.exists("/dev/nvidia0"))
                if device == "cuda" and r.returncode != 0 and no_device:
                    print("SKIP: no CUDA device\n" + r.stderr)
                    return 77
                expect(r.returncode == 0, f"--device={device} {' '.join(args)}: expected success", r)
                if r.returncode != 0:
                    return 1
                if device == "cuda":
                    expect(re.search(r"^rank 0/1 .* backend=nccl device=cuda:\d+ \(.+\)$", r.stdout,
                                     re.M), "--device=cuda: expected the device in the rank line", r)
                dumps[(name, device)] = floats(path)
        cuda, cpu = dumps[("init", "cuda")], dumps[("init", "cpu")]
        if cuda != cpu:
            failures.append("--lr=0: the GPU and the CPU dumped different parameters "
                            f"({sum(a != b for a, b in zip(cuda, cpu))} of {len(cpu)} differ)")
        cuda, cpu = dumps[("trained", "cuda")], dumps[("trained", "cpu")]
        differ = [i for i, (a, b) in enumerate(zip(cuda, cpu)) if abs(a - b) > 1e-4 + 1e-3 * abs(b)]
        worst = max(abs(a - b) for a, b in zip(cuda, cpu))
        moved = max(abs(a - b) for a, b in zip(cpu, dumps[("init", "cpu")]))
        print(f"GPU vs CPU after 20 steps: largest |difference| {worst:.3g}, "
              f"largest move from the initialization {moved:.3g}")
        if len(cuda) != len(cpu) or differ:
            failures.append(f"after 20 steps: {len(differ)} parameters differ beyond the "
                            f"tolerance (largest |difference| {worst:.3g})")
        if not moved > 100 * worst:
            failures.append(f"training moved the parameters by {moved:.3g} only")
    return 0


def main():
    mode, train, have_cuda = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if mode == "unit":
        unit(train, have_cuda)
    elif not have_cuda or not have_data():
        print("SKIP: " + ("this build of train has no CUDA" if not have_cuda else
                          f"no dataset in {DATA}"))
        return 77
    elif gpu(train) == 77:
        return 77
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
