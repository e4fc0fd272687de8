#!/usr/bin/python3
"""One rank of bench/launch/init-scale for torch: init_process_group("gloo",
"env://"), a barrier and one small all_reduce, with the same row as init_rank:

  init impl=torch rank=R ranks=N init_ms=I barrier_ms=B allreduce_ms=A end_ms=E

import_ms (importing torch) is printed as well: end_ms includes it, init_ms does
not. Run it with /usr/bin/python3 (Debian's python3-torch). torch builds
without libuv need USE_LIBUV=0, which the driver sets.
"""
import os
import sys
import time

t_import = time.monotonic()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

a = time.monotonic()
dist.init_process_group("gloo", init_method="env://")
b = time.monotonic()
dist.barrier()
c = time.monotonic()
x = torch.ones(1024)
dist.all_reduce(x)
d = time.monotonic()
n = dist.get_world_size()
if not bool((x == n).all()):
    print("torch_init_rank: rank %d: wrong all_reduce result" % dist.get_rank(), file=sys.stderr)
    sys.exit(1)
launched = int(os.environ.get("INIT_BENCH_T0_MS", "0"))
end = int(time.time() * 1000) - launched if launched else 0
print("init impl=torch rank=%d ranks=%d init_ms=%.1f barrier_ms=%.1f allreduce_ms=%.1f end_ms=%d import_ms=%.1f"
      % (dist.get_rank(), n, (b - a) * 1e3, (c - b) * 1e3, (d - c) * 1e3, end, (a - t_import) * 1e3))
sys.stdout.flush()
dist.destroy_process_group()
