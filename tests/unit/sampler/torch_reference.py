"""Reference indices from the installed PyTorch, for the `sampler` unit test.

Modes (first argument):
  sampler CONFIG_FILE   each line "n num_replicas rank shuffle seed epoch drop_last"
                        (shuffle/drop_last are 0/1); prints "torch <version>", then per
                        line "ok <count> <i0> <i1> ...": list(DistributedSampler) at that epoch.
  randperm N SEED       writes torch.randperm(N, generator seeded SEED) to stdout as raw
                        little-endian int64.
  probe                 prints "torch <version>".
Exits 3 with a message on stderr when torch cannot be imported.
"""
import sys

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler
except Exception as exc:  # report exactly why, the C++ side turns it into a failure
    sys.stderr.write("cannot import torch: %r\n" % (exc,))
    sys.exit(3)


def sampler_mode(path):
    out = sys.stdout
    out.write("torch %s\n" % torch.__version__)
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            n, replicas, rank, shuffle, seed, epoch, drop_last = (int(x) for x in fields)
            s = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                   shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
            s.set_epoch(epoch)
            indices = list(s)
            out.write("ok %d" % len(indices))
            if indices:
                out.write(" ")
                out.write(" ".join(map(str, indices)))
            out.write("\n")
    out.flush()


def randperm_mode(n, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    # int64 in native (little-endian on the machines we test) byte order, no copy.
    sys.stdout.buffer.write(memoryview(perm.numpy()))
    sys.stdout.buffer.flush()


def main():
    mode = sys.argv[1]
    if mode == "sampler":
        sampler_mode(sys.argv[2])
    elif mode == "randperm":
        randperm_mode(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "probe":
        print("torch %s" % torch.__version__)
    else:
        sys.stderr.write("unknown mode %r\n" % mode)
        sys.exit(2)


if __name__ == "__main__":
    main()
