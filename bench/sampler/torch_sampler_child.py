"""One measurement of torch's DistributedSampler for sampler_bench (run in a fresh process).

Usage: torch_sampler_child.py N REPLICAS RANK EPOCH
Times constructing the sampler, set_epoch and list(sampler) -- a full epoch of one rank as a
Python list -- and prints one line of key=value pairs: wall and CPU seconds, the number of
indices, the peak RSS before and after the timed region (KiB, getrusage), and a checksum
sum((2*i+1) * index_i) mod 2^64 computed after the peak was read.
"""
import resource
import sys
import time

import numpy as np
import torch
from torch.utils.data.distributed import DistributedSampler


def main():
    n, replicas, rank, epoch = (int(x) for x in sys.argv[1:5])
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall0, cpu0 = time.perf_counter(), time.process_time()
    sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    indices = list(sampler)
    wall1, cpu1 = time.perf_counter(), time.process_time()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    values = np.fromiter(indices, dtype=np.uint64, count=len(indices))
    weights = 2 * np.arange(len(values), dtype=np.uint64) + 1
    checksum = int((values * weights).sum(dtype=np.uint64))
    print("wall_s=%.9f cpu_s=%.9f count=%d base_kib=%d peak_kib=%d checksum=%d version=%s"
          % (wall1 - wall0, cpu1 - cpu0, len(indices), base_kib, peak_kib, checksum,
             torch.__version__))


if __name__ == "__main__":
    main()
