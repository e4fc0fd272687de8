"""One rank of the rendezvous tests: init_process_group with
init_method="slurmddp://", then what argv[1] says:
  allreduce   sum of rank+1 over all ranks, one DDP step; prints both
  gate        prints "ready", waits for a line on stdin, then as allreduce
  init-rank   passes rank=argv[2], world_size=argv[3] to init_process_group
  stranger    the last rank, after the rendezvous, also knocks on the store's
              port as a stranger (no token, a wrong token, torch's own
              TCPStore client) and prints what happened; then as allreduce
"""
import hashlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import slurmddp.torch  # noqa: F401  (registers slurmddp://)
import support


def work():
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    x = torch.full((4, 8), float(rank))
    model(x).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()[:16]
    print(f"rank {rank}/{world} sum={t.item():g} params={digest}", flush=True)


def knock():
    """Connects to MASTER_ADDR:MASTER_PORT as a stranger would; prints one
    line per attempt: 'stranger <how>: refused (<error type>)' or 'ADMITTED'."""
    import slurmddp
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    for how, token in [("no-token", ""), ("wrong-token", "0bad" * 8)]:
        try:
            slurmddp.connect(host, port, token=token, timeout_ms=10000).close()
            print(f"stranger {how}: ADMITTED", flush=True)
        except slurmddp.ProtocolError as e:
            print(f"stranger {how}: refused ({type(e).__name__}: {e})", flush=True)
    try:
        s = support.torch_store_client(host, port, 2, timedelta(seconds=5))
        s.set("stranger", "x")
        print(f"stranger torch-tcpstore: ADMITTED ({s.get('stranger')!r})", flush=True)
    except Exception as e:  # torch raises RuntimeError or its own timeout
        print(f"stranger torch-tcpstore: refused ({type(e).__name__}: {e})", flush=True)


def main():
    mode = sys.argv[1]
    kwargs = {"timeout": timedelta(seconds=60)}
    if mode == "init-rank":
        kwargs.update(rank=int(sys.argv[2]), world_size=int(sys.argv[3]))
    dist.init_process_group("gloo", init_method="slurmddp://", **kwargs)
    if mode == "gate":
        print("ready", flush=True)
        sys.stdin.readline()
    if mode == "stranger" and dist.get_rank() == dist.get_world_size() - 1:
        knock()
    work()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
