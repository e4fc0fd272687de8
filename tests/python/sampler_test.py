"""slurmddp.torch.DistributedSampler against torch's own sampler (parity
mode), coverage of the scalable mode, evaluation mode, mid-epoch resume and
a DataLoader over it. Configurations are drawn at random with a fixed seed."""
import random
import unittest

import support

support.require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data as tud  # noqa: E402

import slurmddp  # noqa: E402
import slurmddp.torch as sdt  # noqa: E402


class IndexDataset(tud.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def torch_indices(n, replicas, rank, shuffle, seed, drop_last, epoch):
    s = tud.DistributedSampler(IndexDataset(n), replicas, rank, shuffle=shuffle, seed=seed,
                               drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s), len(s), s.total_size


def all_of_epoch(n, replicas, epoch, **kw):
    """Every rank's indices of one epoch, concatenated, as a NumPy array."""
    parts = []
    for r in range(replicas):
        s = slurmddp.Sampler(n, replicas, r, epoch=epoch, **kw)
        parts.append(s.take(s.size))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class Parity(unittest.TestCase):
    def test_random_configurations_match_torch_index_for_index(self):
        rng = random.Random(20261203)
        for case in range(300):
            n = rng.choice([0, 1, 2, 3, rng.randrange(1, 100), rng.randrange(1, 5000),
                            rng.randrange(1, 1 << 17)])
            replicas = rng.choice([1, 2, 3, 4, 8, rng.randrange(1, 70)])
            rank = rng.randrange(replicas)
            shuffle = rng.random() < 0.8
            drop_last = rng.random() < 0.3
            seed = rng.choice([0, 42, rng.randrange(-(1 << 40), 1 << 40)])
            epoch = rng.choice([0, 1, rng.randrange(1000)])
            config = dict(n=n, replicas=replicas, rank=rank, shuffle=shuffle, seed=seed,
                          drop_last=drop_last, epoch=epoch)
            with self.subTest(case=case, **config):
                expected, length, total = torch_indices(n, replicas, rank, shuffle, seed,
                                                        drop_last, epoch)
                ours = sdt.DistributedSampler(IndexDataset(n), replicas, rank, shuffle=shuffle,
                                              seed=seed, drop_last=drop_last, mode="torch",
                                              block_size=rng.choice([1, 7, 4096, 65536]))
                ours.set_epoch(epoch)
                self.assertEqual(list(ours), expected)
                self.assertEqual(len(ours), length)
                self.assertEqual(ours.num_samples, length)
                self.assertEqual(ours.total_size, total)

    def test_auto_mode_is_torch_up_to_2_pow_24(self):
        self.assertEqual(sdt.DistributedSampler(1 << 24, 8, 0).mode, "torch")
        self.assertEqual(sdt.DistributedSampler((1 << 24) + 1, 8, 0).mode, "scalable")

    def test_every_epoch_after_set_epoch_matches(self):
        ours = sdt.DistributedSampler(IndexDataset(1000), 3, 2, seed=7)
        for epoch in [0, 1, 2, 1, 5]:
            ours.set_epoch(epoch)
            self.assertEqual(list(ours), torch_indices(1000, 3, 2, True, 7, False, epoch)[0])


class Scalable(unittest.TestCase):
    def test_every_index_once_per_epoch_and_padding_wraps(self):
        for n, replicas in [(1, 1), (1, 3), (17, 4), (1000, 7), (3_000_001, 8)]:
            for epoch in [0, 3]:
                with self.subTest(n=n, replicas=replicas, epoch=epoch):
                    got = all_of_epoch(n, replicas, epoch, mode="scalable")
                    total = -(-n // replicas) * replicas
                    self.assertEqual(len(got), total)
                    counts = np.bincount(got, minlength=n)
                    self.assertEqual(len(counts), n)
                    self.assertTrue((counts >= 1).all(), "an index was never visited")
                    # Padding repeats total - n indices once more.
                    self.assertEqual(int((counts - 1).sum()), total - n)
                    self.assertTrue((counts <= 2).all() or total - n >= n)

    def test_evaluation_mode_visits_each_index_exactly_once(self):
        for n, replicas in [(0, 3), (10, 4), (1001, 8), (2_000_003, 6)]:
            with self.subTest(n=n, replicas=replicas):
                got = all_of_epoch(n, replicas, 1, mode="scalable", evaluation=True)
                self.assertEqual(sorted(np.bincount(got, minlength=n).tolist()), [1] * n)
                s = sdt.DistributedSampler(n, replicas, 0, evaluation=True)
                sizes = s.shard_sizes()
                self.assertEqual(sum(sizes), n)
                self.assertLessEqual(max(sizes) - min(sizes), 1)

    def test_epochs_differ_and_seeds_differ(self):
        a = all_of_epoch(100_000, 4, 0, mode="scalable")
        b = all_of_epoch(100_000, 4, 1, mode="scalable")
        c = all_of_epoch(100_000, 4, 0, mode="scalable", seed=1)
        self.assertFalse(np.array_equal(a, b))
        self.assertFalse(np.array_equal(a, c))

    def test_a_huge_dataset_costs_no_memory_up_front(self):
        s = sdt.DistributedSampler(10**12 + 1, 1024, 1023)
        self.assertEqual(len(s), 10**12 // 1024 + 1)  # padded up
        first = list(zip(range(5), iter(s)))
        self.assertEqual(len(first), 5)
        self.assertTrue(all(0 <= i <= 10**12 for _, i in first))


class Resume(unittest.TestCase):
    def test_mid_epoch_state_continues_with_exactly_the_rest(self):
        rng = random.Random(5)
        for mode in ["torch", "scalable"]:
            for cut in [0, 1, 6, 7, 8, 99, 249, 250]:
                with self.subTest(mode=mode, cut=cut):
                    a = sdt.DistributedSampler(1000, 4, 3, seed=11, mode=mode,
                                               block_size=rng.choice([1, 7, 64]))
                    a.set_epoch(4)
                    it = iter(a)
                    head = [next(it) for _ in range(cut)]
                    state = a.state_dict()
                    self.assertEqual(state["epoch"], 4)
                    self.assertEqual(state["position"], cut)
                    rest = list(it)
                    b = sdt.DistributedSampler(1000, 4, 3, seed=11, mode=mode)
                    b.load_state_dict(state)
                    self.assertEqual(b.epoch, 4)
                    b.set_epoch(4)  # what a training loop does at the top of the epoch
                    self.assertEqual(list(b), rest)
                    self.assertEqual(head + rest, list(b))  # the next iteration: the whole epoch

    def test_dataloader_resume_with_consumed_batches(self):
        ds = IndexDataset(1003)
        a = sdt.DistributedSampler(ds, 2, 1, seed=3)
        a.set_epoch(2)
        batches = [b.tolist() for b in tud.DataLoader(ds, batch_size=16, sampler=a)]
        b = sdt.DistributedSampler(ds, 2, 1, seed=3)
        b.set_epoch(2)
        loader = iter(tud.DataLoader(ds, batch_size=16, sampler=b))
        for _ in range(5):
            next(loader)
        state = b.state_dict(position=5 * 16)
        c = sdt.DistributedSampler(ds, 2, 1, seed=3)
        c.load_state_dict(state)
        c.set_epoch(state["epoch"])
        resumed = [x.tolist() for x in tud.DataLoader(ds, batch_size=16, sampler=c)]
        self.assertEqual(resumed, batches[5:])

    def test_another_epoch_starts_from_its_beginning(self):
        a = sdt.DistributedSampler(100, 2, 0)
        a.set_epoch(1)
        it = iter(a)
        next(it)
        b = sdt.DistributedSampler(100, 2, 0)
        b.load_state_dict(a.state_dict())
        b.set_epoch(2)
        self.assertEqual(list(b), torch_indices(100, 2, 0, True, 0, False, 2)[0])

    def test_a_pickled_copy_continues_where_the_original_stands(self):
        import pickle
        a = sdt.DistributedSampler(IndexDataset(500), 3, 2, seed=4, block_size=16)
        a.set_epoch(6)
        it = iter(a)
        for _ in range(40):
            next(it)
        b = pickle.loads(pickle.dumps(a))
        self.assertEqual((b.epoch, b.rank, b.num_replicas, len(b)), (6, 2, 3, len(a)))
        self.assertEqual(list(b), list(it))
        fresh = pickle.loads(pickle.dumps(sdt.DistributedSampler(500, 3, 2, seed=4)))
        self.assertEqual(list(fresh), torch_indices(500, 3, 2, True, 4, False, 0)[0])

    def test_a_state_of_another_configuration_is_refused(self):
        state = sdt.DistributedSampler(1000, 4, 1).state_dict()
        for other in [dict(dataset=1001), dict(rank=2), dict(seed=1), dict(drop_last=True)]:
            kw = dict(dataset=1000, num_replicas=4, rank=1)
            kw.update(other)
            with self.subTest(**other), self.assertRaisesRegex(slurmddp.InvalidArgument,
                                                               "another configuration"):
                sdt.DistributedSampler(**kw).load_state_dict(state)
        with self.assertRaisesRegex(slurmddp.InvalidArgument, "expected a dict"):
            sdt.DistributedSampler(1000, 4, 1).load_state_dict({"epoch": 1})


class DataLoaderAndErrors(unittest.TestCase):
    def test_it_is_a_torch_distributed_sampler(self):
        self.assertIsInstance(sdt.DistributedSampler(10, 2, 0), tud.DistributedSampler)

    def test_dataloader_with_worker_processes(self):
        ds = IndexDataset(999)
        ours = sdt.DistributedSampler(ds, 2, 0, seed=1)
        theirs = tud.DistributedSampler(ds, 2, 0, seed=1)
        a = [b.tolist() for b in tud.DataLoader(ds, batch_size=10, sampler=ours, num_workers=2)]
        b = [b.tolist() for b in tud.DataLoader(ds, batch_size=10, sampler=theirs)]
        self.assertEqual(a, b)

    def test_the_position_counts_what_the_loader_yielded_not_what_workers_prefetched(self):
        # Note [What the training consumed]
        ds = IndexDataset(200)
        whole = list(sdt.DistributedSampler(ds, 2, 1, seed=4))
        for kw in (dict(num_workers=0, batch_size=4), dict(num_workers=2, batch_size=4),
                   dict(num_workers=2, batch_size=4, persistent_workers=True, prefetch_factor=3),
                   dict(num_workers=0, batch_size=None)):
            with self.subTest(**kw):
                sampler = sdt.DistributedSampler(ds, 2, 1, seed=4)
                loader = tud.DataLoader(ds, sampler=sampler, **kw)
                seen = []
                for n, b in enumerate(loader, 1):
                    seen += [int(i) for i in (b.tolist() if kw["batch_size"] else [b])]
                    if n == 5:
                        state = sampler.state_dict()
                        break
                self.assertEqual(state["position"], len(seen))
                again = sdt.DistributedSampler(ds, 2, 1, seed=4)
                again.load_state_dict(state)
                rest = [int(i) for b in tud.DataLoader(ds, sampler=again, batch_size=4)
                        for i in b.tolist()]
                self.assertEqual(seen + rest, whole)

    def test_a_loader_it_cannot_count_or_one_dropped_mid_epoch_is_said(self):
        ds = IndexDataset(200)
        sampler = sdt.DistributedSampler(ds, 2, 0)

        class Pairs:  # a batch sampler of its own, without a batch_size
            def __iter__(self):
                it = iter(sampler)
                return iter(lambda: [i for _, i in zip(range(2), it)], [])

        batches = Pairs()
        with self.assertWarnsRegex(UserWarning, "through Pairs, whose batches it cannot count"):
            next(iter(tud.DataLoader(ds, batch_sampler=batches, num_workers=1)))
        sampler = sdt.DistributedSampler(ds, 2, 0)
        for n, _ in enumerate(tud.DataLoader(ds, sampler=sampler, batch_size=4, num_workers=1)):
            if n == 2:
                break
        with self.assertWarnsRegex(UserWarning, "was dropped mid-epoch"):
            self.assertGreaterEqual(sampler.state_dict()["position"], 12)
        self.assertEqual(sampler.state_dict(position=12)["position"], 12)

    def test_dataloader_batches_are_torchs(self):
        ds = IndexDataset(10_007)
        ours = sdt.DistributedSampler(ds, 3, 1, seed=9, drop_last=True)
        theirs = tud.DistributedSampler(ds, 3, 1, seed=9, drop_last=True)
        for epoch in [0, 1]:
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            a = [b.tolist() for b in tud.DataLoader(ds, batch_size=32, sampler=ours)]
            b = [b.tolist() for b in tud.DataLoader(ds, batch_size=32, sampler=theirs)]
            self.assertEqual(a, b)

    def test_rank_and_replicas_default_to_the_environment(self):
        import os
        old = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
        try:
            os.environ.update({"RANK": "2", "WORLD_SIZE": "5"})
            s = sdt.DistributedSampler(100)
            self.assertEqual((s.rank, s.num_replicas), (2, 5))
            del os.environ["RANK"]
            with self.assertRaisesRegex(slurmddp.InvalidArgument, "RANK is not set"):
                sdt.DistributedSampler(100)
            os.environ["RANK"] = "x"
            with self.assertRaisesRegex(slurmddp.InvalidArgument, "RANK='x' is not an integer"):
                sdt.DistributedSampler(100)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_bad_values_name_themselves(self):
        with self.assertRaisesRegex(ValueError, r"invalid rank 4, rank should be in the interval "
                                                r"\[0, 3\]"):
            sdt.DistributedSampler(10, 4, 4)
        with self.assertRaisesRegex(ValueError, "mode='fast'"):
            sdt.DistributedSampler(10, 4, 1, mode="fast")
        with self.assertRaisesRegex(ValueError, "drop_last"):
            sdt.DistributedSampler(10, 4, 1, drop_last=True, evaluation=True)
        with self.assertRaisesRegex(ValueError, "block_size=0"):
            sdt.DistributedSampler(10, 4, 1, block_size=0)
        with self.assertRaisesRegex(ValueError, "position=11"):
            sdt.DistributedSampler(40, 4, 1).state_dict(position=11)

    def test_indices_and_take_give_numpy_blocks(self):
        s = slurmddp.Sampler(1000, 4, 1, seed=2)
        whole = s.indices(0, s.size)
        self.assertEqual(whole.dtype, np.int64)
        self.assertEqual(whole.tolist(), torch_indices(1000, 4, 1, True, 2, False, 0)[0])
        self.assertEqual(s.take(100).tolist() + s.take_list(1000), whole.tolist())
        self.assertEqual(s.take(5).tolist(), [])
        with self.assertRaisesRegex(ValueError, "max=-1"):
            s.take(-1)
        with self.assertRaises(ValueError):
            s.indices(200, 100)


if __name__ == "__main__":
    support.main()
