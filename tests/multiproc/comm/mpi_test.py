"""The MPI communicator under mpirun (Note [MPI communicator]): an MPI program
that also uses slurm-ddp (init_from_mpi, every collective, GradSync, the
sampler), a rank that never joins (a timeout on the others, not a hang), and
init() with SLURMDDP_BACKEND=mpi. Usage: mpi_test.py <mpi_rank binary>."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

RANK_BIN = sys.argv.pop(1) if len(sys.argv) > 1 else ""


def mpirun(n, scenario, timeout=240, env_extra=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("SLURM", "SLURMDDP_", "PMIX", "OMPI_")):
            del env[k]
    # Root in CI; ranks may outnumber cores; loopback only.
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"})
    env.update(env_extra or {})
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), RANK_BIN, scenario]
    start = time.monotonic()
    p = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    return p, time.monotonic() - start


def results(out):
    return [line[len("RESULT "):] for line in out.splitlines() if line.startswith("RESULT ")]


class Mpi(unittest.TestCase):
    def test_an_mpi_program_uses_the_runtime(self):
        for n in (1, 2, 3, 4):
            with self.subTest(ranks=n):
                p, _ = mpirun(n, "collectives")
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertEqual(results(p.stdout), ["ok"] * n, p.stdout + p.stderr)

    def test_a_rank_that_never_joins_times_the_others_out(self):
        with tempfile.TemporaryDirectory() as results_dir:
            p, took = mpirun(3, "timeout", timeout=120,
                             env_extra={"SLURMDDP_TEST_RESULTS_DIR": results_dir})
        got = results(p.stdout)
        self.assertEqual(len(got), 2, p.stdout + p.stderr)
        for line in got:
            self.assertTrue(line.startswith(
                "TimeoutError mpi: failed to allreduce 100 float32 (sum), op #0: allreduce did not "
                "complete within 2000 ms (MPI cannot say which rank is missing"), line)
        self.assertLess(took, 60)
        self.assertNotEqual(p.returncode, 0)

    def test_init_with_the_mpi_backend(self):
        p, _ = mpirun(3, "backend")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(results(p.stdout), ["ok backend=mpi world=3"] * 3, p.stdout + p.stderr)


if __name__ == "__main__":
    if not RANK_BIN:
        sys.exit("usage: mpi_test.py <mpi_rank binary>")
    unittest.main(verbosity=2)
