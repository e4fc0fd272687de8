"""scripts/check-layers on a small tree laid out as the repository: an example
that includes a private header, a benchmark that reaches into the runtime or
names bench/common by a relative path are found, with their lines; what the
rules allow is not."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check-layers")

FILES = {
    "include/slurmddp/store.h": "#include <string>\n",
    "runtime/store/server.h": '#include "slurmddp/store.h"\n',
    "runtime/comm/nccl/nccl_util.h": "",
    "plugin/options.h": "",
    "python/src/bindings.h": "",
    "tests/support/rank_launcher.h": "",
    "bench/common/stats.h": "",
    "bench/store/store_bench.cpp": ('#include "stats.h"\n#include "rank_launcher.h"\n'
                                    '#include "slurmddp/store.h"\n#include "slurmddp_config.h"\n'
                                    '#include "../common/stats.h"\n#include "store/server.h"\n'),
    "examples/train/train_config.h.in": "",
    "examples/train/mlp.h": "",
    "examples/train/main.cpp": ('#include "mlp.h"\n#include "train_config.h"\n'
                                '#include "slurmddp/store.h"\n#include "comm/nccl/nccl_util.h"\n'
                                '#include "rank_launcher.h"\n'),
}


def main():
    with tempfile.TemporaryDirectory() as root:
        for path, text in FILES.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
    want = [
        "bench/store/store_bench.cpp:5: bench includes an unresolved header (../common/stats.h): "
        "a relative path, not by folder from the runtime root (a benchmark names bench/common's "
        "headers bare)",
        "bench/store/store_bench.cpp:6: bench includes store (store/server.h)",
        "examples/train/main.cpp:4: examples includes comm/nccl (comm/nccl/nccl_util.h)",
        "examples/train/main.cpp:5: examples includes an unresolved header (rank_launcher.h): "
        "not in the includer's folder",
    ]
    got = r.stdout.splitlines()
    if r.returncode != 1 or got != want:
        print("expected exit 1 and\n  %s\ngot exit %d and\n  %s\n%s"
              % ("\n  ".join(want), r.returncode, "\n  ".join(got), r.stderr))
        return 1
    print("check-layers: finds the 4 violations of the sample benchmark and example, and "
          "nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())
