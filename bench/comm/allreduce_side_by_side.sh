#!/bin/bash
# Allreduce float32 sum, 4 KiB ... 256 MiB, 2 and 4 ranks: slurm-ddp's Gloo
# communicator (gloo_allreduce_bench) and torch 1.13's gloo backend
# (torch_gloo_allreduce.py under /usr/bin/python3) in one run, alternating
# round by round, then side by side: per size the median over rounds of each
# side's median time, and busbw. Exit status 1 if either side reported wrong
# results or failed.
#
# Usage: allreduce_side_by_side.sh --bench PATH [--ranks "2 4"] [--rounds R]
#                                  [--min-bytes B] [--max-bytes B]
set -u
here=$(cd "$(dirname "$0")" && pwd)
bench=""
ranks="2 4"
rounds=2
min_bytes=4096
max_bytes=$((256 << 20))
python=/usr/bin/python3
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --min-bytes) min_bytes=$2; shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    *) echo "usage: $0 --bench PATH [--ranks \"2 4\"] [--rounds R] [--min-bytes B] [--max-bytes B]" >&2
       exit 2 ;;
  esac
done
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
  echo "$0: --bench must name the built gloo_allreduce_bench" >&2
  exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for n in $ranks; do
  for r in $(seq 1 "$rounds"); do
    "$bench" --ranks "$n" --min-bytes "$min_bytes" --max-bytes "$max_bytes" \
      --ifname lo >"$out/ours.$n.$r" || status=1
    GLOO_SOCKET_IFNAME=lo "$python" "$here/torch_gloo_allreduce.py" --ranks "$n" \
      --min-bytes "$min_bytes" --max-bytes "$max_bytes" >"$out/torch.$n.$r" || status=1
  done
done

"$python" - "$out" "$rounds" $ranks <<'EOF'
import statistics
import sys

out, rounds, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


def rows(path):
    table, preamble = {}, []
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("#"):
                    preamble.append(line.rstrip())
                    continue
                c = line.split()
                if len(c) == 8:
                    table[int(c[0])] = (float(c[4]), int(c[7]))
    except OSError:
        pass
    return table, preamble


for n in ranks:
    sides = {}
    for side in ("ours", "torch"):
        per_size = {}
        for r in range(1, rounds + 1):
            table, preamble = rows(f"{out}/{side}.{n}.{r}")
            if r == 1:
                print("\n".join(preamble))
            for size, (us, wrong) in table.items():
                per_size.setdefault(size, []).append((us, wrong))
        sides[side] = per_size
    factor = 2.0 * (int(n) - 1) / int(n)
    print(f"# side by side, {n} ranks: median over {rounds} round(s) of each side's median; "
          f"GB = 1e9, busbw = algbw * {factor:g}")
    print("#%13s %12s %8s %6s | %12s %12s %8s | %12s %12s %8s | %10s" % (
        "size(B)", "count", "type", "redop", "time(us)", "busbw(GB/s)", "#wrong",
        "torch us", "torch busbw", "#wrong", "busbw x"))
    for size in sorted(set(sides["ours"]) | set(sides["torch"])):
        cells = []
        busbws = []
        for side in ("ours", "torch"):
            got = sides[side].get(size)
            if not got:
                cells.append("%12s %12s %8s" % ("-", "-", "-"))
                busbws.append(None)
                continue
            us = statistics.median(t for t, _ in got)
            wrong = sum(w for _, w in got)
            bw = size / us / 1e3 * factor
            busbws.append(bw)
            cells.append("%12.1f %12.3f %8d" % (us, bw, wrong))
        ratio = "%10.2f" % (busbws[0] / busbws[1]) if None not in busbws else "%10s" % "-"
        print(" %13d %12d %8s %6s | %s | %s | %s" % (size, size // 4, "float", "sum", cells[0],
                                                      cells[1], ratio))
    print()
EOF
exit $status
