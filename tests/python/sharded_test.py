"""slurmddp.ShardedCheckpointer with real torch.distributed.checkpoint: a
DTensor sharded over CPU ranks (Gloo) saved, damaged, killed midway and
loaded back; on a torch without torch.distributed.checkpoint (1.13) the
error that says so."""
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import support


def has_dcp():
    import torch
    try:
        import torch.distributed.checkpoint  # noqa: F401
        from torch.distributed.tensor import distribute_tensor  # noqa: F401
    except ImportError:
        return False
    return int(torch.__version__.split(".")[0]) >= 2


def run(world, *args, **env):
    env.setdefault("USE_LIBUV", "0")
    port = support.free_port()
    return support.finish(support.start_ranks("sharded_rank.py", range(world), world, port, args,
                                              **env))


def loaded(out):
    return {r: o.strip() for r, (_, o, _) in out.items()}


# 8x4 rows 0..31 + 1000*step, sharded by rows over 2 ranks: each shard 4x4
def expect(step, rank):
    full = sum(range(32)) + 32 * 1000 * step
    mine = sum(range(16 * rank, 16 * rank + 16)) + 16 * 1000 * step
    return (f"rank {rank} loaded {step} full={full} mine={mine} plain={3 * step} "
            f"position={step}")


class Sharded(unittest.TestCase):
    def setUp(self):
        if not has_dcp():
            self.skipTest("no torch.distributed.checkpoint here: "
                          "test_an_older_torch_is_told_what_it_lacks covers this torch")

    def test_saved_shards_load_back_into_the_layout(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = run(2, "save", tmp, 2, 4, 6)
            for r, (code, o, e) in out.items():
                self.assertEqual(code, 0, o + e)
            self.assertEqual(sorted(n for n in os.listdir(tmp) if n.startswith("step-")),
                             ["step-4", "step-6"])  # keep=2
            names = sorted(os.listdir(os.path.join(tmp, "step-6")))
            for want in ("COMPLETE", "rank-0.json", "rank-1.json", ".metadata"):
                self.assertIn(want, names)
            self.assertTrue(any(n.startswith("__1_") for n in names), names)
            out = run(2, "load", tmp)
            self.assertEqual(loaded(out), {r: expect(6, r) for r in range(2)})

    def test_a_damaged_shard_is_refused_naming_it_and_the_previous_loads(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", tmp, 3, 6)
            sdir = os.path.join(tmp, "step-6")
            victim = os.path.join(sdir, sorted(n for n in os.listdir(sdir)
                                               if n.startswith("__1_"))[0])
            with open(victim, "r+b") as f:
                b = f.read(1)
                f.seek(0)
                f.write(bytes([b[0] ^ 0x01]))
            out = run(2, "load", tmp)
            self.assertEqual(loaded(out), {r: expect(3, r) for r in range(2)})
            self.assertIn(f"refusing checkpoint {sdir}: rank 1: checkpoint {victim} is damaged: "
                          f"sha256", out[0][2])

    def test_a_rank_killed_while_saving_leaves_the_previous_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", tmp, 3)
            out = run(2, "save", tmp, 6, KILL_AT=6)  # rank 1 dies after DCP wrote step 6
            self.assertEqual(out[1][0], -signal.SIGKILL)
            self.assertNotEqual(out[0][0], 0)
            self.assertFalse(os.path.exists(os.path.join(tmp, "step-6", "COMPLETE")))
            out = run(2, "load", tmp)
            self.assertEqual(loaded(out), {r: expect(3, r) for r in range(2)})

    def test_a_job_id_handed_out_again_does_not_resume_the_old_jobs_shards(self):
        # Note [Run identity]; ShardedCheckpointer claims the directory as Checkpointer does
        job = dict(PER_JOB="1", SLURM_JOB_ID="77", SLURM_CLUSTER_NAME="north")
        with tempfile.TemporaryDirectory() as tmp:
            run(2, "save", tmp, 3, SLURM_JOB_START_TIME="1000", **job)
            out = run(2, "load", tmp, SLURM_JOB_START_TIME="2000", **job)
            self.assertIn(f"checkpoint: {tmp}/job-77 belongs to another job 77 of cluster north, "
                          f"which started at 1970-01-01 00:16:40 UTC (1000)", out[0][1])
            self.assertIn("ShardedCheckpointer.load_latest failed on another rank: rank 0:",
                          out[1][1])
            out = run(2, "load", tmp, SLURM_JOB_START_TIME="2000", SLURM_RESTART_COUNT="1", **job)
            self.assertEqual(loaded(out), {r: expect(3, r) for r in range(2)})


class OlderTorch(unittest.TestCase):
    def test_an_older_torch_is_told_what_it_lacks(self):
        if has_dcp():
            self.skipTest("torch.distributed.checkpoint is here: the Sharded tests cover it")
        r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                         "sharded_rank.py"), "old"],
                           capture_output=True, text=True, env=support.rank_env(0, 1, 1))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"ShardedCheckpointer: needs torch.distributed.checkpoint "
                                   r"\(torch >= 2.2\); this is torch 1\.")


if __name__ == "__main__":
    support.main()
