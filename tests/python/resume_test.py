"""slurmddp.StopSignal, Checkpointer and requeue_and_exit with real torch: ranks
as processes on loopback over torch's Gloo group (init_method "slurmddp://"
and "env://"). The stop step, the checkpoint chosen and the messages are
asserted; the cluster tests (tests/system/resume_test.cpp) run the same through
Slurm with requeue."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

import support


def ranks(world, *args, **env):
    # env:// on a torch built without libuv (Debian 13's 2.6) needs USE_LIBUV=0,
    # as docs/python.md tells its users.
    env.setdefault("USE_LIBUV", "0")
    port = support.free_port()
    return support.start_ranks("resume_rank.py", range(world), world, port, args, **env)


def run(world, *args, **env):
    return support.finish(ranks(world, *args, **env))


def stop_steps(out):
    return {r: re.findall(r"stopped at (\d+) on (\w+)", o) for r, (_, o, _) in out.items()}


class AgreedStop(unittest.TestCase):
    def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(self):
        for method in ("slurmddp", "env"):
            with self.subTest(method=method), tempfile.TemporaryDirectory() as tmp:
                # rank 1 signals itself before step 7; the check at 7 carries
                # it, the check at 8 reads it: every rank stops after step 8.
                out = run(3, "stop", method, tmp, 50, 7)
                for r, (code, o, e) in out.items():
                    self.assertEqual(code, 75, f"rank {r}: {o}{e}")
                    self.assertEqual(stop_steps(out)[r], [("8", "SIGUSR1")], o + e)
                    self.assertNotIn("finished", o)
                # outside Slurm rank 0 says why it could not requeue, and exits 75 anyway
                self.assertIn("SLURM_JOB_ID is not set", out[0][2])
                self.assertIn("exiting with 75", out[0][2])
                ckdir = os.path.join(tmp, "local", "step-8")
                self.assertEqual(sorted(os.listdir(ckdir)),
                                 ["COMPLETE", "rank-0.ckpt", "rank-1.ckpt", "rank-2.ckpt"])

    def test_a_signal_from_outside_during_training(self):
        with tempfile.TemporaryDirectory() as tmp:
            procs = ranks(3, "stop", "slurmddp", tmp, 100000, 0)
            # once rank 2 reports a step, SIGTERM reaches it alone
            line = procs[2].stdout.readline()
            self.assertTrue(line.startswith("rank 2 step"), line)
            procs[2].send_signal(signal.SIGTERM)
            out = support.finish(procs)
            steps = stop_steps(out)
            self.assertEqual(len({s[0][0] for s in steps.values() if s}), 1, steps)
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 75, f"rank {r}: {e}")
                self.assertEqual(steps[r][0][1], "SIGTERM")
                self.assertLess(int(steps[r][0][0]), 100000)


class ExactResume(unittest.TestCase):
    def test_stopped_and_resumed_ends_bit_identical_to_an_uninterrupted_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            ref = run(3, "train", "slurmddp", os.path.join(tmp, "ref"), 40, 0)
            first = run(3, "train", "slurmddp", os.path.join(tmp, "ck"), 40, 15)
            second = run(3, "train", "slurmddp", os.path.join(tmp, "ck"), 40, 0)
            want = {re.search(r"sha256 (\w+)", o).group(1) for _, o, _ in ref.values()}
            self.assertEqual(len(want), 1)
            for r in range(3):
                self.assertEqual(first[r][0], 75, first[r][2])
                self.assertIn(f"rank {r} stopped at 16", first[r][1])
                self.assertEqual(second[r][0], 0, second[r][2])
                self.assertIn(f"rank {r} resumed at 16", second[r][1])
                self.assertEqual(re.search(r"sha256 (\w+)", second[r][1]).group(1),
                                 next(iter(want)))


class WithDataLoaderWorkers(unittest.TestCase):
    """The docs' five lines over a DataLoader whose workers prefetch: the
    resumed run trains on exactly the samples the uninterrupted one did."""

    def samples(self, out, r):
        return [line.split()[3:] for line in out[r][1].splitlines() if " samples " in line]

    def test_stopped_and_resumed_with_two_workers_is_bit_identical(self):
        with tempfile.TemporaryDirectory() as tmp:
            ref = run(2, "loader", "slurmddp", os.path.join(tmp, "ref"), 20, 0, 2)
            ck = os.path.join(tmp, "ck")
            first = run(2, "loader", "slurmddp", ck, 20, 7, 2)
            second = run(2, "loader", "slurmddp", ck, 20, 0, 2)
            for r in range(2):
                self.assertEqual(first[r][0], 75, first[r][2])
                self.assertIn(f"rank {r} stopped at 8", first[r][1])
                self.assertEqual(second[r][0], 0, second[r][2])
                # 12 batches of 4 an epoch (96 samples, 2 ranks): step 8 is
                # mid-epoch, with 2 workers x 2 batches prefetched past it
                self.assertIn(f"rank {r} resumed at 8 epoch 0 position 32", second[r][1])
                self.assertEqual(self.samples(first, r) + self.samples(second, r),
                                 self.samples(ref, r))
                self.assertEqual(re.search(r"sha256 (\w+)", second[r][1]).group(1),
                                 re.search(r"sha256 (\w+)", ref[r][1]).group(1))


class Agreement(unittest.TestCase):
    def test_ranks_that_check_at_different_steps_fail_naming_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(2, "desync", "slurmddp", tmp)
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
                self.assertRegex(o, rf"rank {r} error: StopSignal.should_stop: the ranks checked "
                                 rf"at different steps: step 3 on rank 0 \(\S+\); step 4 on "
                                 rf"rank 1 \(\S+\)\. Every rank must call should_stop\(\) with "
                                 rf"the same step numbers")

    def test_a_handler_installed_later_still_sees_the_signal_and_stop_agrees(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(2, "late", "slurmddp", tmp)
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 0, e)
                # check 2 carries rank 0's signal, check 3 reads it
                self.assertIn(f"rank {r} stopped at 3 on SIGUSR1; later handler called "
                              f"{1 if r == 0 else 0} times", o)
                self.assertIn("a handler for SIGUSR1 was installed after StopSignal()", e)

    def test_a_state_torch_could_not_load_is_refused_at_save_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(2, "unsafe", "slurmddp", tmp)
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
            self.assertRegex(out[0][1], r"rank 0 InvalidArgument: Checkpointer.save: the state of "
                             r"step 1 holds .*numpy\.ndarray.*, which torch.load\(weights_only="
                             r"True\) refuses")
            self.assertRegex(out[1][1], r"rank 1 Error: Checkpointer.save: step 1 failed on "
                             r"another rank: rank 0: Checkpointer.save: the state of step 1 holds")
            self.assertFalse(os.path.exists(os.path.join(tmp, "local", "step-1", "COMPLETE")))


class Checkpoints(unittest.TestCase):
    def loaded(self, out):
        return {r: o.strip() for r, (_, o, _) in out.items()}

    def test_rank_zero_scope_keeps_the_newest_and_every_rank_reads_rank_zeros_state(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(3, "save", "slurmddp", tmp, "rank0", 2, 4, 6)
            self.assertEqual(sorted(n for n in os.listdir(tmp) if n.startswith("step-")),
                             ["step-4", "step-6"])  # keep=2
            with open(os.path.join(tmp, "LATEST")) as f:
                self.assertEqual(f.read(), "step-6\n")
            out = run(3, "load", "env", tmp, "rank0")
            for r in range(3):
                self.assertEqual(self.loaded(out)[r], f"rank {r} loaded 6 state=0,6 position=6")

    def test_every_rank_scope_returns_each_ranks_own_state(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(3, "save", "slurmddp", tmp, "every_rank", 5)
            out = run(3, "load", "slurmddp", tmp, "every_rank")
            for r in range(3):
                self.assertEqual(self.loaded(out)[r], f"rank {r} loaded 5 state={r},5 position=5")
            # a Checkpointer of the other scope is told, not handed rank 0's state
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
                self.assertIn(f"Checkpointer: {tmp}/step-5 was saved with scope='every_rank', "
                              f"this Checkpointer has scope='rank0'", o)

    def test_no_checkpoint_is_a_fresh_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(2, "load", "slurmddp", tmp, "rank0")
            self.assertEqual(self.loaded(out), {0: "rank 0 loaded none", 1: "rank 1 loaded none"})

    def test_a_damaged_checkpoint_is_refused_naming_file_and_rank_then_the_previous_loads(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(3, "save", "slurmddp", tmp, "rank0", 3, 6)
            victim = os.path.join(tmp, "step-6", "rank-1.ckpt")
            with open(victim, "r+b") as f:  # one flipped byte
                f.seek(60)
                b = f.read(1)
                f.seek(60)
                f.write(bytes([b[0] ^ 0x01]))
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r in range(3):
                self.assertEqual(self.loaded(out)[r], f"rank {r} loaded 3 state=0,3 position=3")
            self.assertIn(f"refusing checkpoint {tmp}/step-6: rank 1: checkpoint {victim} is "
                          f"damaged: checksum mismatch", out[0][2])
            self.assertIn(f"resuming from {tmp}/step-3", out[0][2])

            # both damaged: an error on every rank, never a fresh start
            with open(os.path.join(tmp, "step-3", "rank-0.ckpt"), "r+b") as f:
                f.truncate(40)
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
                self.assertIn(f"no usable checkpoint in {tmp}: step-6 (rank 1: checkpoint "
                              f"{victim} is damaged", o)
                self.assertIn("step-3 (rank 0: checkpoint", o)
                self.assertIn("not starting from scratch", o)
            # rank 0's payload is every rank's: rank 2 names it too
            self.assertIn(f"rank 2: checkpoint {tmp}/step-3/rank-0.ckpt is damaged: truncated",
                          out[2][1])

    def test_a_rank_killed_while_writing_leaves_the_previous_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(3, "save", "slurmddp", tmp, "rank0", 3, 6, KILL_AT=6)
            self.assertEqual(out[2][0], -signal.SIGKILL)
            for r in (0, 1):  # the others fail in the checkpoint's barrier, not hang
                self.assertNotEqual(out[r][0], 0, out[r][2])
                self.assertNotIn("saved", out[r][1])
            self.assertFalse(os.path.exists(os.path.join(tmp, "step-6", "COMPLETE")))
            with open(os.path.join(tmp, "LATEST")) as f:
                self.assertEqual(f.read(), "step-3\n")
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r in range(3):
                self.assertEqual(self.loaded(out)[r], f"rank {r} loaded 3 state=0,3 position=3")

    def test_saving_a_step_again_killed_midway_leaves_no_mix(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(3, "save", "slurmddp", tmp, "rank0", 3, 6)
            # step 6 again (its rank files replaced one by one), rank 2 killed in its write
            out = run(3, "save", "slurmddp", tmp, "rank0", 6, KILL_AT=6)
            self.assertEqual(out[2][0], -signal.SIGKILL)
            self.assertFalse(os.path.exists(os.path.join(tmp, "step-6", "COMPLETE")))
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r in range(3):
                self.assertEqual(self.loaded(out)[r], f"rank {r} loaded 3 state=0,3 position=3")

    def test_a_fresh_start_beside_other_jobs_checkpoints_says_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", "slurmddp", tmp, "rank0", 4, PER_JOB=1, SLURM_JOB_ID="1234")
            out = run(2, "load", "slurmddp", tmp, "rank0", PER_JOB=1, SLURM_JOB_ID="99")
            self.assertEqual(self.loaded(out), {0: "rank 0 loaded none", 1: "rank 1 loaded none"})
            self.assertIn(f"slurmddp: starting from scratch: no checkpoint of this run (99) in "
                          f"{tmp}/job-99, while {tmp} holds checkpoints of other jobs: job-1234 "
                          f"(step 4). A job submitted again by hand is a new run; to continue "
                          f"one, pass its directory: Checkpointer('{tmp}/job-1234', "
                          f"per_job=False)", out[0][2])
            self.assertNotIn("starting from scratch", out[1][2])

    def test_a_checkpoint_of_another_world_size_or_run_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", "slurmddp", tmp, "rank0", 4)
            out = run(3, "load", "slurmddp", tmp, "rank0")
            self.assertIn(f"checkpoint {tmp}/step-4 was written by 2 ranks; this job has 3",
                          out[1][1])
            self.assertEqual(out[1][0], 3)
        with tempfile.TemporaryDirectory() as tmp:
            # per-job directories: a checkpoint another job left in this job's is foreign
            run(2, "save", "slurmddp", tmp, "rank0", 4, PER_JOB=1, SLURM_JOB_ID="1234")
            os.rename(os.path.join(tmp, "job-1234"), os.path.join(tmp, "job-99"))
            out = run(2, "load", "slurmddp", tmp, "rank0", PER_JOB=1, SLURM_JOB_ID="99")
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
            self.assertIn(f"checkpoint: {tmp}/job-99 belongs to job 1234, not to this job 99",
                          out[0][1])
            self.assertIn("Checkpointer.load_latest failed on another rank: rank 0: checkpoint: "
                          f"{tmp}/job-99 belongs to job 1234", out[1][1])
            # without its record, the checkpoint itself names its run
            os.unlink(os.path.join(tmp, "job-99", "RUN"))
            out = run(2, "load", "slurmddp", tmp, "rank0", PER_JOB=1, SLURM_JOB_ID="99",
                      SLURM_RESTART_COUNT="1")
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 3, o + e)
                self.assertIn(f"checkpoint {tmp}/job-99/step-4 belongs to run 1234, not to this "
                              f"run (99)", o)

    def test_a_job_id_handed_out_again_does_not_resume_or_prune_the_old_jobs_checkpoints(self):
        # Note [Run identity]: the same job id, cluster and directory; another start
        job = dict(PER_JOB=1, SLURM_JOB_ID="1234", SLURM_CLUSTER_NAME="north")
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", "slurmddp", tmp, "rank0", 4, SLURM_JOB_START_TIME="1000", **job)
            ckdir = os.path.join(tmp, "job-1234")
            for mode, args in (("load", ()), ("save", (5,))):
                out = run(2, mode, "slurmddp", tmp, "rank0", *args, SLURM_JOB_START_TIME="2000",
                          **job)
                for r, (code, o, e) in out.items():
                    self.assertEqual(code, 3, o + e)
                self.assertIn(f"checkpoint: {ckdir} belongs to another job 1234 of cluster north, "
                              f"which started at 1970-01-01 00:16:40 UTC (1000); this job started "
                              f"at 1970-01-01 00:33:20 UTC (2000) and was never requeued",
                              out[0][1])
                self.assertIn("failed on another rank: rank 0: checkpoint: ", out[1][1])
                self.assertEqual(sorted(os.listdir(ckdir)), ["LATEST", "RUN", "step-4"])
            # the old job's requeued run resumes it and keeps saving there
            out = run(2, "load", "slurmddp", tmp, "rank0", SLURM_JOB_START_TIME="3000",
                      SLURM_RESTART_COUNT="1", **job)
            self.assertEqual(self.loaded(out), {0: "rank 0 loaded 4 state=0,4 position=4",
                                                1: "rank 1 loaded 4 state=0,4 position=4"})
            with open(os.path.join(ckdir, "RUN")) as f:
                nonce = re.fullmatch(r"run cluster=north job=1234 started=1000 nonce=([0-9a-f]{16})\n",
                                     f.read()).group(1)
            with open(os.path.join(ckdir, "step-4", "COMPLETE")) as f:
                self.assertTrue(f.read().endswith(f" run=1234 nonce={nonce}\n"))


class Errors(unittest.TestCase):
    def test_bad_arguments_and_environment_are_named(self):
        code = r"""
import os, signal, slurmddp
for make in (lambda: slurmddp.StopSignal(check_every=0),
             lambda: slurmddp.StopSignal([signal.SIGKILL]),
             lambda: slurmddp.Checkpointer('x', keep=0),
             lambda: slurmddp.Checkpointer('x', scope='rank1')):
    try:
        make()
    except slurmddp.InvalidArgument as e:
        print(e)
os.environ['SLURM_RESTART_COUNT'] = 'two'
try:
    slurmddp.restart_count()
except slurmddp.InvalidArgument as e:
    print(e)
os.environ['SLURMDDP_RESTART_COUNT'] = '3'
os.environ.update(SLURM_JOB_ID='77', SLURM_ARRAY_JOB_ID='70', SLURM_ARRAY_TASK_ID='7')
print(slurmddp.restart_count(), slurmddp.run_id())
s = slurmddp.StopSignal()
try:
    slurmddp.StopSignal()
except slurmddp.InvalidArgument as e:
    print(e)
try:
    s.should_stop(1)
except slurmddp.InvalidArgument as e:
    print(e)
try:
    slurmddp.requeue(scontrol="no-such-scontrol")
except slurmddp.Error as e:
    print(e)
"""
        env = support.rank_env(0, 1, 1)
        env["PYTHONPATH"] = os.pathsep.join(map(os.path.abspath, env["PYTHONPATH"].split(":")))
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               cwd=tmp, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "StopSignal: check_every=0; expected an integer >= 1",
            "StopSignal: cannot catch SIGKILL; expected signals such as SIGTERM, SIGUSR1, "
            "SIGUSR2, SIGHUP",
            "Checkpointer: keep=0; expected an integer >= 1",
            "Checkpointer: scope='rank1'; expected one of rank0, every_rank",
            "restart_count: SLURM_RESTART_COUNT='two' is not a count of restarts (expected an "
            "integer >= 0)",
            "3 70_7",
            "StopSignal: another StopSignal is installed in this process",
            "slurmddp: torch.distributed is not initialized; call dist.init_process_group(...) "
            "before the first should_stop(), save() or load_latest()",
            "requeue: failed to run 'no-such-scontrol requeue 70_7': No such file or directory "
            "(scontrol is not installed here, e.g. inside a container image; exit with 75 and let "
            "the batch script requeue on that status, or RequeueExit=75 in slurm.conf; see "
            "docs/user-guide.md)",
        ])

    def test_requeue_and_exit_without_a_process_group_still_requeues_or_says_why(self):
        r = subprocess.run([sys.executable, "-c", "import slurmddp; slurmddp.requeue_and_exit()"],
                           capture_output=True, text=True, env=support.rank_env(0, 1, 1))
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("requeue: SLURM_JOB_ID is not set", r.stderr)
        self.assertIn("exiting with 75 for the batch script to requeue", r.stderr)

    def test_a_handler_installed_before_still_runs_and_an_agreed_stop_ignores_the_signals(self):
        code = r"""
import os, signal, slurmddp, torch.distributed as d
seen = []
signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))
d.init_process_group('gloo', init_method='env://')
with slurmddp.StopSignal() as stop:
    print(stop.local_signal, stop.agreed_signal, repr(stop.signal_name))
    os.kill(os.getpid(), signal.SIGUSR2)
    print(stop.local_signal == signal.SIGUSR2, stop.agreed_signal)
    print(stop.should_stop(1), stop.should_stop(2), stop.signal_name, stop.stopped_at,
          stop.agreed_signal == signal.SIGUSR2)
print(seen == [signal.SIGUSR2], signal.getsignal(signal.SIGUSR2) is not None)
os.kill(os.getpid(), signal.SIGTERM)  # ignored after the agreed stop
print("alive")
def loop():
    s = slurmddp.StopSignal([signal.SIGUSR1])
    s.should_stop(1)  # a check in flight when it is dropped
loop()
os.kill(os.getpid(), signal.SIGUSR1)  # the training is over: ignored, not fatal
print("done")
"""
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=support.rank_env(0, 1, support.free_port(), USE_LIBUV="0"),
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["None None ''", "True None",
                                                 "False True SIGUSR2 2 True", "True True", "alive",
                                                 "done"])


if __name__ == "__main__":
    support.main()
