"""scripts/doc-paths on a small tree laid out as the repository: the paths a
document names that do not exist are found, with their lines; placeholders,
built programs and paths outside the tree are not."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "doc-paths")

DOC = """# A page
The server is `runtime/store/server.cpp` (Note [X]), line `runtime/store/server.cpp:12`.
Gone: `runtime/store/tcp_client.cpp:40`, and [the guide](guide.md#setup).
Built: `bench/store/store_bench --help` is not a path, `bench/store/store_bench` is.
Not checked: `runtime/<layer>/`, `tests/unit/*.cpp`, `PREFIX/include/slurm`,
`../shared/x`, [a site](https://example.org/runtime/no), `ninja -C build`.
A link that is there: [the page](index.md); one that is not: [API](api.md).
"""


def main():
    with tempfile.TemporaryDirectory() as root:
        for d in ("runtime/store", "bench/store", "docs"):
            os.makedirs(os.path.join(root, d))
        open(os.path.join(root, "runtime/store/server.cpp"), "w").close()
        with open(os.path.join(root, "bench/store/meson.build"), "w") as f:
            f.write("store_bench = executable('store_bench', files('store_bench.cpp'))\n")
        with open(os.path.join(root, "docs/index.md"), "w") as f:
            f.write(DOC)
        r = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True,
                           text=True)
    want = ["doc-paths: docs/index.md:3: runtime/store/tcp_client.cpp:40 does not exist",
            "doc-paths: docs/index.md:3: guide.md#setup does not exist",
            "doc-paths: docs/index.md:7: api.md does not exist",
            "doc-paths: 1 files, 3 paths that do not exist"]
    got = r.stdout.splitlines()
    if r.returncode != 1 or sorted(got) != sorted(want):
        print("expected exit 1 and\n  %s\ngot exit %d and\n  %s\n%s"
              % ("\n  ".join(want), r.returncode, "\n  ".join(got), r.stderr))
        return 1
    print("doc-paths: finds the 3 missing paths of the sample page and nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())
