"""slurmddp.lightning.SlurmDDP with real PyTorch Lightning: the Lightning
example (examples/pytorch/lightning_train.py) as 2 ranks on loopback with the
variables the plugin exports, stopped by a signal to one rank mid-epoch,
resumed through Trainer.fit(ckpt_path=), compared with an uninterrupted run;
a damaged checkpoint; a rank that hangs (tests/python/lightning_rank.py). The
cluster test (tests/system/lightning_test.cpp) runs the example through Slurm
with requeue. Without Lightning for the Python under test it skips, saying
why (the PyPI lane's venv has it: tests/pypi/requirements.txt)."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import support

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch", "lightning_train.py")
ARGS = ["--epochs", "2", "--batch-size", "64", "--deterministic", "--log-every", "50"]
STEPS = 938  # 2 epochs of 60000 / 2 ranks / 64


def slurm_env(rank, world, restart=0):
    """What srun and the plugin give a task of a one-node step of job 4242."""
    return {"SLURM_STEP_ID": 0, "SLURM_JOB_ID": 4242, "SLURM_NNODES": 1,
            "SLURM_NTASKS_PER_NODE": world, "SLURM_NTASKS": world, "SLURM_PROCID": rank,
            "SLURM_LOCALID": rank, "SLURM_NODEID": 0, "SLURM_JOB_NAME": "lightning-test",
            "SLURM_RESTART_COUNT": restart}


def start(cwd, script, args, world=2, restart=0, **extra):
    port = support.free_port()
    procs = {}
    for r in range(world):
        env = support.rank_env(r, world, port, **slurm_env(r, world, restart), **extra)
        procs[r] = support.spawn([sys.executable, script, *args], env, cwd=cwd)
    return procs


class Lines:
    """Rank 0's stdout read on a thread: the test waits for a line, then reads the rest."""

    def __init__(self, proc):
        self.lines, self.cond = [], threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc):
        for line in proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        proc.stdout.close()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_for(self, text, timeout=120):
        with self.cond:
            ok = self.cond.wait_for(lambda: text in self.lines or None in self.lines, timeout)
            return ok and text in self.lines

    def text(self):
        self.thread.join(timeout=30)
        return "".join(line for line in self.lines if line)


def finish(procs, lines=None, timeout=180):
    out = {}
    for r, p in procs.items():
        try:
            if lines and r == 0:
                o, e = "", p.stderr.read()
                p.stderr.close()
            else:
                o, e = p.communicate(timeout=timeout)
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            support.stop_hung(procs)
            o, e = p.communicate()
        if lines and r == 0:
            o = lines.text()
        out[r] = (p.returncode, o, e)
    return out


def digests(out):
    return {r: re.findall(r"parameter sha256 ([0-9a-f]+) after step (\d+)", o)
            for r, (_, o, _) in out.items()}


def stop_and_resume(test, tmp, signum, at_step, to_rank, extra=()):
    """Runs the example, sends `signum` to rank `to_rank` once rank 0 logged
    `at_step`, checks the agreed stop, then runs it again (restart count 1)."""
    procs = start(tmp, EXAMPLE, ARGS + list(extra))
    lines = Lines(procs[0])
    if not lines.wait_for(f"step {at_step}\n"):
        test.fail(f"rank 0 did not log step {at_step}: {lines.text()}")
    procs[to_rank].send_signal(signum)
    first = finish(procs, lines)
    stops = {r: re.findall(r"rank \d: stopped after step (\d+) on (\w+), checkpoint in "
                           r"checkpoints/job-4242", o) for r, (_, o, _) in first.items()}
    name = signal.Signals(signum).name
    for r, (code, o, e) in first.items():
        test.assertEqual(code, 75, f"rank {r}: {o}{e[-3000:]}")
        test.assertEqual(len(stops[r]), 1, o + e[-3000:])
        test.assertEqual(stops[r][0][1], name)
    step = stops[0][0][0]
    test.assertEqual(stops[1][0][0], step)
    test.assertLess(int(step), STEPS)
    test.assertIn("Lightning's handlers for SIGTERM, SIGUSR1 are replaced by SlurmDDP's agreed "
                  "stop", first[0][2])
    test.assertEqual(sorted(os.listdir(os.path.join(tmp, "checkpoints", "job-4242",
                                                     f"step-{step}"))),
                     ["COMPLETE", "rank-0.ckpt", "rank-1.ckpt"])
    second = finish(start(tmp, EXAMPLE, ARGS + list(extra), restart=1))
    for r, (code, o, e) in second.items():
        test.assertEqual(code, 0, f"rank {r}: {o}{e[-3000:]}")
    test.assertIn(f"slurmddp.lightning: resuming from checkpoints/job-4242/step-{step} at step "
                  f"{step}, run 4242, restart count 1", second[0][2])
    test.assertNotIn("dataloader is not resumable", second[0][2])
    return int(step), second


class LightningStopAndResume(unittest.TestCase):
    reference = None

    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as tmp:
            out = finish(start(tmp, EXAMPLE, ARGS))
        for r, (code, o, e) in out.items():
            assert code == 0, f"reference rank {r}: {o}{e[-3000:]}"
        sums = digests(out)
        assert sums[0] == sums[1] and len(sums[0]) == 1 and sums[0][0][1] == str(STEPS), sums
        cls.reference = sums[0]

    def test_usr1_to_one_rank_mid_epoch_stops_every_rank_and_resumes_bit_identical(self):
        with tempfile.TemporaryDirectory() as tmp:
            step, out = stop_and_resume(self, tmp, signal.SIGUSR1, 650, 1)
            self.assertGreater(step, 469, "stopped in the second epoch")
            self.assertEqual(digests(out), {0: self.reference, 1: self.reference})

    def test_sigterm_with_loader_workers_in_the_first_epoch_resumes_bit_identical(self):
        with tempfile.TemporaryDirectory() as tmp:
            step, out = stop_and_resume(self, tmp, signal.SIGTERM, 200, 0,
                                        ["--workers", "2"])
            self.assertLess(step, 469, "stopped in the first epoch")
            self.assertEqual(digests(out), {0: self.reference, 1: self.reference})

    def test_a_damaged_checkpoint_is_refused_never_a_fresh_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            procs = start(tmp, EXAMPLE, ARGS)
            lines = Lines(procs[0])
            if not lines.wait_for("step 100\n"):
                self.fail(f"rank 0 did not log step 100: {lines.text()}")
            procs[1].send_signal(signal.SIGUSR1)
            first = finish(procs, lines)
            self.assertEqual([c for c, _, _ in first.values()], [75, 75], first)
            [step] = [d for d in os.listdir(os.path.join(tmp, "checkpoints", "job-4242"))
                      if d.startswith("step-")]
            victim = os.path.join("checkpoints", "job-4242", step, "rank-0.ckpt")
            with open(os.path.join(tmp, victim), "r+b") as f:
                f.seek(200)
                byte = f.read(1)
                f.seek(200)
                f.write(bytes([byte[0] ^ 0xFF]))
            again = finish(start(tmp, EXAMPLE, ARGS, restart=1))
            for r, (code, o, e) in again.items():
                self.assertNotEqual(code, 0, f"rank {r}: {o}{e[-2000:]}")
                self.assertNotIn("parameter sha256", o)
            err = again[0][2]
            self.assertIn(f"rank 0: checkpoint {victim} is damaged: checksum mismatch", err)
            self.assertIn("no usable checkpoint in checkpoints/job-4242", err)
            self.assertIn("not starting from scratch", err)


class LightningHangReport(unittest.TestCase):
    def test_a_rank_that_hangs_in_training_step_is_named_with_its_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(HERE, "lightning_rank.py")
            out = finish(start(tmp, script, ["hang", "2", "5"], world=4,
                               SLURMDDP_HANG_AFTER="2s"))
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 0, f"rank {r}: {o}{e[-3000:]}")
                self.assertIn(f"rank {r} done at step 20", o)
            reports = "".join(e for _, _, e in out.values())
            self.assertRegex(reports, r"hang report \d+: step 6: .*; rank 2 on \S+ "
                                      r"at step 6 for \d+ s in lightning_rank\.py:\d+ "
                                      r"\(time\.sleep\(seconds\)\)")


def require_lightning():
    try:
        import lightning.pytorch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: PyTorch Lightning cannot be imported by {sys.executable} ({e}); the PyPI "
              f"lane's venv has it (tests/pypi/requirements.txt)", file=sys.stderr)
        sys.exit(support.SKIP)


if __name__ == "__main__":
    support.require_torch()
    require_lightning()
    unittest.main(verbosity=2)
