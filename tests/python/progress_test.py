"""slurmddp.torch.Progress (Note [Progress records]) with real torch: ranks
as processes on loopback over init_method="slurmddp://" and torch's Gloo
group. The report's text is asserted: rank, line of code, collective."""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import support


def run(mode, steps, *args, **env):
    port = support.free_port()
    procs = support.start_ranks("progress_rank.py", range(3), 3, port, [mode, steps, *args], **env)
    return support.finish(procs)


def wait_for_log(paths, pattern, within):
    """Polls the ranks' stderr files until one matches `pattern` (or `within` s pass)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for p in paths:
            with open(p, encoding="utf-8", errors="replace") as f:
                if re.search(pattern, f.read()):
                    return True
        time.sleep(0.02)  # polling the log files for the event
    return False


class HangReport(unittest.TestCase):
    def test_a_rank_stopped_inside_a_collective_is_named_where_it_stopped(self):
        # Ranks 0 and 1 wait in step 5's all_reduce for rank 2 (6 s in its
        # loader); after the report of that wait rank 1 is stopped where it
        # waits. Reports are matched by step, not by number: a slow start (a
        # busy machine) may be reported before step 5 is.
        port = support.free_port()
        with tempfile.TemporaryDirectory() as tmp:
            paths = [os.path.join(tmp, f"rank{r}.err") for r in range(3)]
            started = support.start_ranks("progress_rank.py", range(3), 3, port,
                                          ["loader", "10", "6"], stderr_dir=tmp,
                                          SLURMDDP_HANG_AFTER="1s")
            procs = [started[r] for r in range(3)]
            try:
                self.assertTrue(wait_for_log(paths, r"hang report \d+: step 5: ", 60))
                procs[1].send_signal(signal.SIGSTOP)
                named = wait_for_log(paths, r"rank 1 on \S+ did not answer", 60)
                procs[1].send_signal(signal.SIGCONT)
                self.assertTrue(named)
                deadline = time.monotonic() + 120
                for p in procs:
                    try:
                        p.wait(timeout=max(0.1, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        break
            finally:
                hung = support.stop_hung(dict(enumerate(procs)))
            codes = [p.returncode for p in procs]
            logs = "".join(f"[test: rank {r} still running after 120 s; threads: {t}]\n"
                           for r, t in hung.items())
            for p in paths:
                with open(p, encoding="utf-8") as f:
                    logs += f.read()
        self.assertEqual(codes, [0, 0, 0], logs)
        self.assertRegex(
            logs,
            r"hang report \d+: step 5: 1/3 ranks (waiting in all_reduce|at progress_rank).*; rank 1 "
            r"on \S+ did not answer; last seen at step 5 in all_reduce \(progress_rank\.py:\d+ "
            r"\(dist\.all_reduce\(t\)\)\), \d+ s ago")

    def test_a_slow_data_loader_is_named_with_its_line_and_stack(self):
        out = run("loader", 10, 4, SLURMDDP_HANG_AFTER="1s")
        for r, (code, stdout, stderr) in out.items():
            self.assertEqual(code, 0, stderr)
            self.assertIn(f"rank {r} done steps=10", stdout)
        stderr = "".join(e for _, _, e in out.values())
        # The others wait in step 5's all_reduce; rank 2 is in its loader (the
        # report's number is not asserted: a slow start may be reported first).
        report = re.search(
            r"hang report (\d+): step 5: 2/3 ranks waiting in all_reduce \(progress_rank\.py:\d+ "
            r"\(dist\.all_reduce\(t\)\)\); rank 2 on \S+ at step 5 for \d+ s in "
            r"progress_rank\.py:\d+ \(time\.sleep\(slow_seconds\)\)", stderr)
        self.assertIsNotNone(report, stderr)
        # Then rank 2's stacks: its main thread in batches(), called from main().
        stacks = stderr[stderr.index(f"hang report {report.group(1)}: rank 2 on "):]
        self.assertRegex(stacks, r'File ".*progress_rank\.py", line \d+ in batches\n'
                                 r'  File ".*progress_rank\.py", line \d+ in main')
        # Each report is printed by one rank only.
        numbers = re.findall(r"hang report (\d+): step", stderr)
        self.assertEqual(sorted(numbers), sorted(set(numbers)), stderr)

    def test_the_report_signal_prints_a_report_and_training_goes_on(self):
        # A start slower than the threshold on a busy machine can be reported
        # by itself first (as tests/multiproc/group/init_test.cpp's twin
        # found under TSan): the signal's report is the one rank 1 printed,
        # whatever its number, and no report is printed by two ranks.
        out = run("signal", 100, SLURMDDP_HANG_AFTER="3s")
        for r, (code, stdout, stderr) in out.items():
            self.assertEqual(code, 0, stderr)
            self.assertIn(f"rank {r} done steps=100", stdout)
        # The rank the signal reached asked, and printed the report.
        self.assertRegex(out[1][2], r"hang report \d+: step \d+: [123]/3 ranks ")
        self.assertRegex(out[1][1], r"rank 1 done steps=100 printed=[1-9]")
        numbers = [n for r in out for n in re.findall(r"hang report (\d+): step", out[r][2])]
        self.assertEqual(len(numbers), len(set(numbers)), [out[r][2] for r in out])

    def test_a_rank_slow_to_load_its_data_is_named_as_a_straggler(self):
        out = run("straggler", 41, SLURMDDP_STRAGGLER_EVERY="20")
        for r, (code, stdout, stderr) in out.items():
            self.assertEqual(code, 0, stderr)
        # Rank 0 reports; the last window's report may not make it before exit.
        self.assertRegex(
            out[0][2],
            r"straggler report, steps 1-20: rank 1 on \S+: [0-9.]+x the median \(data 3[0-9.]+ vs "
            r"[0-9.]+ ms a step\) for 20 steps; the others wait for it in all_reduce \(median "
            r"[0-9.]+ ms a step\)")
        self.assertNotIn("straggler report", out[1][2] + out[2][2])


if __name__ == "__main__":
    support.main()
