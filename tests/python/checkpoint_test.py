"""slurmddp.Checkpointer's files with real torch (Note [Streaming checkpoints],
Note [Checkpoint layout]): torch.save streamed into the rank file and
torch.load reading the payload where it lies, on every torch; files of version
1 still loading; private modes; rank 0's damaged payload refused on every rank."""
import os
import tempfile
import unittest

import support
from resume_test import run

ONE_RANK = r"""
import io, os, sys, torch, torch.distributed as dist, slurmddp
from slurmddp import _core
from slurmddp._checkpoint import _PayloadWindow
d = sys.argv[1]
dist.init_process_group('gloo', init_method='env://')
state = {'big': torch.arange(3_000_000, dtype=torch.float32), 'small': torch.ones(3),
         'lr': 0.1, 'name': 'x'}
ck = slurmddp.Checkpointer(d, per_job=False)
ck.save(5, state)
sdir = os.path.join(d, 'step-5')
path = os.path.join(sdir, 'rank-0.ckpt')
with open(path, 'rb') as f:
    print(f.readline().decode().strip(), oct(os.stat(path).st_mode & 0o777),
          oct(os.stat(sdir).st_mode & 0o777), sorted(os.listdir(sdir)))
c = ck.load_latest()
print('loaded', c.step, torch.equal(c.state['big'], state['big']), c.state['lr'], c.state['name'])

# a checkpoint of version 1, written by the encoder of that version
buf = io.BytesIO()
torch.save({'old': torch.full((4,), 7.0)}, buf)
os.makedirs(os.path.join(d, 'step-9'))
with open(os.path.join(d, 'step-9', 'rank-0.ckpt'), 'wb') as f:
    f.write(_core.encode_checkpoint(9, 0, 1, '', buf.getvalue(), version=1))
_core.write_atomic(os.path.join(d, 'step-9'), 'COMPLETE', 'complete step=9 world=1 scope=rank0\n')
_core.write_atomic(d, 'LATEST', 'step-9\n')
c = ck.load_latest()
print('v1', c.step, c.state['old'].tolist(),
      _core.CheckpointFile(os.path.join(d, 'step-9', 'rank-0.ckpt'), True).version)

# torch.save straight into a writer, torch.load from a window onto the file
w = _core.CheckpointWriter(d, 'direct.ckpt', 1, 0, 1, 'sampler text')
torch.save(state, w)
w.commit()
f = _core.CheckpointFile(os.path.join(d, 'direct.ckpt'), True)
with _PayloadWindow(f, f.payload_offset, f.payload_bytes) as window:
    back = torch.load(window)
print('direct', f.version, f.sampler(), f.payload_bytes > 12_000_000,
      torch.equal(back['big'], state['big']), back['lr'])
dist.destroy_process_group()
"""


class Files(unittest.TestCase):
    def test_streamed_save_and_load_and_a_version_one_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = support.subprocess.run(
                [support.sys.executable, "-c", ONE_RANK, tmp], capture_output=True, text=True,
                env=support.rank_env(0, 1, support.free_port(), USE_LIBUV="0"), timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.splitlines(), [
                "slurmddp-checkpoint v2 0o600 0o700 ['COMPLETE', 'rank-0.ckpt']",
                "loaded 5 True 0.1 x",
                "v1 9 [7.0, 7.0, 7.0, 7.0] 1",
                "direct 2 sampler text True True 0.1",
            ])

    def test_rank_zeros_damaged_payload_is_refused_on_every_rank(self):
        with tempfile.TemporaryDirectory() as tmp:
            run(3, "save", "slurmddp", tmp, "rank0", 3, 6)
            victim = os.path.join(tmp, "step-6", "rank-0.ckpt")
            size = os.path.getsize(victim)
            with open(victim, "r+b") as f:  # a byte of the payload
                f.seek(size // 2)
                b = f.read(1)
                f.seek(size // 2)
                f.write(bytes([b[0] ^ 0x01]))
            out = run(3, "load", "slurmddp", tmp, "rank0")
            for r in range(3):
                self.assertEqual(out[r][1].strip(), f"rank {r} loaded 3 state=0,3 position=3",
                                 out[r][2])
            self.assertIn(f"refusing checkpoint {tmp}/step-6: rank 0: checkpoint {victim} is "
                          f"damaged: checksum mismatch", out[0][2])


if __name__ == "__main__":
    support.main()
