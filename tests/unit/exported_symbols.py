#!/usr/bin/env python3
"""The installed library exports the public API and nothing of the internals
(Note [Exported symbols] in runtime/meson.build).

Usage: exported_symbols.py LIBSLURMDDP.so
"""
import subprocess
import sys

INTERNAL = ("slurmddp::comm::", "slurmddp::store::", "slurmddp::membership::",
            "slurmddp::grad_sync::", "slurmddp::common::", "slurmddp::log::",
            "slurmddp::launch::", "slurmddp::sampler::", "::Impl::")
PUBLIC = ("slurmddp::init(", "slurmddp::make_tcp_store(", "slurmddp::make_gloo_communicator(",
          "slurmddp::make_nccl_communicator(", "slurmddp::store_barrier(",
          "slurmddp::identity_from_environment(", "slurmddp::GradSync::GradSync(",
          "slurmddp::DistributedSampler::DistributedSampler(", "typeinfo for slurmddp::TimeoutError")


def main():
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", sys.argv[1]], check=True,
                         capture_output=True, text=True).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    leaked = sorted({n for n in names if any(i in n for i in INTERNAL) and
                     not n.startswith(("std::", "void std::"))})
    missing = [p for p in PUBLIC if not any(p in n for n in names)]
    for n in leaked[:40]:
        print("exported but internal: " + n)
    for p in missing:
        print("public but not exported: " + p)
    print("%d symbols exported, %d internal, %d public missing" % (len(names), len(leaked),
                                                                     len(missing)))
    return 1 if leaked or missing else 0


if __name__ == "__main__":
    sys.exit(main())
