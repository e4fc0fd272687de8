"""init_process_group(init_method="slurmddp://") with ranks as processes on
loopback: it trains, a stranger without the token is refused and logged
while the job goes on, a missing rank is named with its host, and
contradicting or lost settings are clear errors."""
import re
import socket
import time
import unittest
from datetime import timedelta

import support

support.require_torch()

import torch.distributed as dist  # noqa: E402

import slurmddp  # noqa: E402
import slurmddp.torch  # noqa: E402, F401


def sums(results):
    return {r: re.search(r"sum=(\S+) params=(\S+)", out[1]) for r, out in results.items()}


class Rendezvous(unittest.TestCase):
    def assert_trained(self, results, world):
        for r, (code, out, err) in results.items():
            self.assertEqual(code, 0, f"rank {r}: {err}")
            self.assertIn(f"rank {r}/{world} sum={world * (world + 1) // 2}", out)
        params = {m.group(2) for m in sums(results).values()}
        self.assertEqual(len(params), 1, f"ranks disagree after a DDP step: {params}")

    def test_four_ranks_train_with_ddp_and_agree(self):
        port = support.free_port()
        results = support.finish(support.start_ranks("torch_rank.py", range(4), 4, port,
                                                     args=["allreduce"]))
        self.assert_trained(results, 4)

    # Note [A master changed after the plugin] (runtime/env/identity.cpp)
    def test_a_master_changed_after_the_plugin_is_reported_and_the_plugins_is_used(self):
        port, other = support.free_port(), support.free_port()
        results = support.finish(support.start_ranks(
            "torch_rank.py", range(2), 2, other, args=["allreduce"], SLURMDDP_STEP="7.0",
            SLURMDDP_MASTER=f"127.0.0.1:{port}"))
        self.assert_trained(results, 2)
        warned = [r for r, (_, _, err) in results.items()
                  if f"MASTER_ADDR:MASTER_PORT=127.0.0.1:{other} differs from 127.0.0.1:{port}"
                  in err]
        self.assertEqual(warned, [0], "the node's local rank 0 warns (one node here)")
        _, _, err = results[0]
        self.assertIn("--container-env=MASTER_ADDR,MASTER_PORT", err)
        self.assertIn(f"init_method=\"slurmddp://\" uses 127.0.0.1:{port}", err)

    def test_without_a_token_the_store_is_open_as_torchs(self):
        port = support.free_port()
        results = support.finish(support.start_ranks("torch_rank.py", range(2), 2, port,
                                                     args=["allreduce"], token=None))
        self.assert_trained(results, 2)

    def test_a_stranger_is_refused_and_logged_and_training_goes_on(self):
        port = support.free_port()
        procs = support.start_ranks("torch_rank.py", range(2), 2, port, args=["gate"])
        try:
            for r, p in procs.items():
                self.assertEqual(p.stdout.readline().strip(), "ready", f"rank {r}")
            # Our client with a wrong token, and one with none.
            for token in ["bad0" * 8, ""]:
                with self.assertRaises(slurmddp.ProtocolError) as cm:
                    slurmddp.connect("127.0.0.1", port, token=token, timeout_ms=5000)
                self.assertIn(f"127.0.0.1:{port}", str(cm.exception))
            # torch's own TCPStore client gets nothing either.
            with self.assertRaises(Exception) as cm:
                s = support.torch_store_client("127.0.0.1", port, 2, timedelta(seconds=5))
                s.get("default_pg/0//cuda//0")
            self.assertNotIn("libuv", str(cm.exception), "torch's client never connected")
            # Raw bytes.
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(b"GET / HTTP/1.0\r\n\r\n" * 4)
                c.settimeout(5)
                try:
                    while c.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        finally:
            for p in procs.values():
                p.stdin.write("go\n")
                p.stdin.flush()
        results = support.finish(procs)
        self.assert_trained(results, 2)
        refusals = [line for line in results[0][2].splitlines() if "refused connection" in line]
        reasons = [re.search(r"reason=([a-z-]+)", line).group(1) for line in refusals]
        # One refusal per connection: our two clients once each; torch's client
        # and the raw bytes as malformed (torch 2.x retries its connection, so
        # its client counts one or more).
        self.assertEqual(reasons.count("no-token"), 1, results[0][2])
        self.assertEqual(reasons.count("wrong-token"), 1, results[0][2])
        self.assertGreaterEqual(reasons.count("malformed"), 2, results[0][2])
        self.assertEqual(len(reasons), 2 + reasons.count("malformed"), results[0][2])

    def test_a_missing_rank_is_named_with_its_host_within_the_timeout(self):
        port = support.free_port()
        start = time.monotonic()
        results = support.finish(support.start_ranks("torch_rank.py", [0, 2], 3, port,
                                                     args=["allreduce"], SLURMDDP_TIMEOUT="2s"))
        self.assertLess(time.monotonic() - start, 30)
        host = socket.gethostname()
        for r, (code, out, err) in results.items():
            self.assertNotEqual(code, 0)
            self.assertIn("slurmddp.TimeoutError: slurmddp:// rendezvous: 2/3 ranks joined; "
                          f"missing: [1] (hosts: {host} [1])", err, f"rank {r}")
            self.assertIn(f"rank={r}, size=3", err)

    def test_a_missing_rank_zero_is_named_by_its_address(self):
        port = support.free_port()
        results = support.finish(support.start_ranks("torch_rank.py", [1], 2, port,
                                                     args=["allreduce"], SLURMDDP_TIMEOUT="2s"))
        code, out, err = results[1]
        self.assertNotEqual(code, 0)
        self.assertIn("slurmddp.TimeoutError: slurmddp:// rendezvous: rank 0 is missing: it hosts "
                      f"the rendezvous store at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) and "
                      "did not come up", err)

    def test_a_rank_argument_that_contradicts_the_environment_is_refused(self):
        port = support.free_port()
        results = support.finish(support.start_ranks("torch_rank.py", [0], 2, port,
                                                     args=["init-rank", 1, 2]))
        code, out, err = results[0]
        self.assertNotEqual(code, 0)
        self.assertIn("slurmddp.InvalidArgument: slurmddp:// rendezvous: rank=1 was passed, but "
                      "the environment gives this task rank 0", err)

    def test_a_lost_token_is_refused(self):
        port = support.free_port()
        results = support.finish(support.start_ranks("torch_rank.py", [0], 1, port,
                                                     args=["allreduce"], token=None,
                                                     SLURMDDP_AUTH="hmac"))
        code, out, err = results[0]
        self.assertNotEqual(code, 0)
        self.assertIn("SLURMDDP_TOKEN is not set", err)


class StoreAdapter(unittest.TestCase):
    """slurmddp.torch.Store keeps torch's Store contract."""

    def setUp(self):
        self.core = slurmddp.connect("127.0.0.1", 0, is_server=True, token="ab" * 16)
        self.store = slurmddp.torch.Store(self.core, timedelta(seconds=1))

    def tearDown(self):
        self.core.close()

    def test_the_calls_torch_makes(self):
        s = self.store
        s.set("k", b"v\x00w")
        self.assertEqual(s.get("k"), b"v\x00w")
        s.set("t", "text")
        self.assertEqual(s.get("t"), b"text")
        self.assertEqual(s.add("c", 5), 5)
        self.assertEqual(s.add("c", -2), 3)
        self.assertEqual(s.compare_set("cas", b"", b"one"), b"one")
        self.assertEqual(s.compare_set("cas", b"x", b"two"), b"one")
        s.wait(["k", "c"])
        s.wait(["k"], timedelta(milliseconds=10))
        self.assertTrue(s.check(["k", "t"]))
        self.assertFalse(s.check(["k", "nope"]))
        self.assertTrue(s.delete_key("k"))
        self.assertFalse(s.delete_key("k"))
        self.assertEqual(s.timeout, timedelta(seconds=1))
        self.assertTrue(s.endpoint.startswith("127.0.0.1:"))

    def test_timeouts_name_the_missing_keys(self):
        with self.assertRaisesRegex(slurmddp.TimeoutError, r"missing=\['absent'\]"):
            self.store.get("absent")
        with self.assertRaisesRegex(TimeoutError, "absent2"):
            self.store.wait(["k0", "absent2"], timedelta(milliseconds=50))

    def test_a_prefix_store_over_it_works(self):
        p = dist.PrefixStore("pg", self.store)
        p.set("a", b"1")
        self.assertEqual(self.store.get("pg/a"), b"1")
        self.assertEqual(p.add("n", 2), 2)


if __name__ == "__main__":
    support.main()
