#!/bin/bash
# Allreduce float32 sum, 4 KiB ... 256 MiB, 2 and 4 ranks on this machine, in
# one run, alternating round by round:
#   ours      slurm-ddp's Gloo communicator (gloo_allreduce_bench) as it runs
#             by default: ranks of one node reduce through shared memory
#             (Note [Shared-memory tier])
#   ours-tcp  the same with SLURMDDP_SHM=0: everything over TCP (loopback)
#   torch     torch 1.13's gloo backend (torch_gloo_allreduce.py, /usr/bin/python3)
#   mpi-shm   with --mpi: OpenMPI's MPI_Allreduce over shared memory (btl vader)
#   mpi-tcp   with --mpi: the same over TCP on loopback (btl tcp)
# then side by side: per size the median over rounds of each side's median
# time, its busbw, and ours' busbw over each other side's. Exit status 1 if any
# side reported wrong results or failed.
#
# With --layouts "2x2 2x4" (NODESxTASKS_PER_NODE) the same runs across the
# nodes of a Slurm cluster instead, every side under srun with the slurm-ddp
# plugin loaded (srun and the cluster's environment in this shell, e.g.
# eval "$(tests/cluster/slurm-cluster env)"; --ifname names the nodes'
# interface, default eth0):
#   ours      srun gloo_allreduce_bench --from-environment: init() as a
#             training program gets it (shared memory within a node, node
#             leaders over TCP)
#   ours-tcp  the same with SLURMDDP_SHM=0
#   ours-mpi  with --mpi: the same with SLURMDDP_BACKEND=mpi under
#             srun --mpi=pmix (slurm-ddp's MPI communicator)
#   torch     srun torch_gloo_allreduce.py --from-environment (env://)
#   mpi       with --mpi: srun --mpi=pmix mpi_allreduce_bench, OpenMPI's own
#             choice of transports (vader within a node, tcp across)
#
# Usage: allreduce_side_by_side.sh --bench PATH [--mpi PATH] [--ranks "2 4"]
#                                  [--rounds R] [--min-bytes B] [--max-bytes B]
#        allreduce_side_by_side.sh --bench PATH [--mpi PATH] --layouts "2x2 2x4"
#                                  [--ifname IF] [--rounds R] [--min-bytes B] ...
set -u
here=$(cd "$(dirname "$0")" && pwd)
bench=""
mpi=""
ranks="2 4"
rounds=2
min_bytes=4096
max_bytes=$((256 << 20))
python=/usr/bin/python3
layouts=""
ifname=eth0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --mpi) mpi=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --min-bytes) min_bytes=$2; shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --ifname) ifname=$2; shift 2 ;;
    *) echo "usage: $0 --bench PATH [--mpi PATH] [--ranks \"2 4\"] [--rounds R] [--min-bytes B] [--max-bytes B]" >&2
       echo "       $0 --bench PATH [--mpi PATH] --layouts \"2x2 2x4\" [--ifname IF] [--rounds R] ..." >&2
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
sizes=(--min-bytes "$min_bytes" --max-bytes "$max_bytes")
if [ -n "$layouts" ]; then
  command -v srun >/dev/null || { echo "$0: --layouts needs srun (a cluster's environment)" >&2; exit 2; }
  groups=""
  for layout in $layouts; do
    nodes=${layout%x*}
    per_node=${layout#*x}
    case "$nodes$per_node" in
      *[!0-9]*|"") echo "$0: --layouts: '$layout' is not NODESxTASKS_PER_NODE" >&2; exit 2 ;;
    esac
    groups="$groups $layout"
    run=(srun -N "$nodes" --ntasks-per-node "$per_node" -n $((nodes * per_node)) --kill-on-bad-exit=1)
    for r in $(seq 1 "$rounds"); do
      "${run[@]}" --mpi=none "$bench" --from-environment "${sizes[@]}" \
        >"$out/ours.$layout.$r" || status=1
      SLURMDDP_SHM=0 "${run[@]}" --mpi=none "$bench" --from-environment "${sizes[@]}" \
        >"$out/ours-tcp.$layout.$r" || status=1
      if [ -n "$mpi" ]; then
        SLURMDDP_BACKEND=mpi OMPI_MCA_btl_tcp_if_include=$ifname "${run[@]}" --mpi=pmix \
          "$bench" --from-environment "${sizes[@]}" >"$out/ours-mpi.$layout.$r" || status=1
      fi
      GLOO_SOCKET_IFNAME=$ifname "${run[@]}" --mpi=none "$python" \
        "$here/torch_gloo_allreduce.py" --from-environment "${sizes[@]}" \
        >"$out/torch.$layout.$r" || status=1
      if [ -n "$mpi" ]; then
        OMPI_MCA_btl_tcp_if_include=$ifname "${run[@]}" --mpi=pmix "$mpi" "${sizes[@]}" \
          >"$out/mpi.$layout.$r" || status=1
      fi
    done
  done
  sides="ours ours-tcp ours-mpi torch mpi"
else
  groups=$ranks
  for n in $ranks; do
    for r in $(seq 1 "$rounds"); do
      "$bench" --ranks "$n" "${sizes[@]}" --ifname lo >"$out/ours.$n.$r" || status=1
      SLURMDDP_SHM=0 "$bench" --ranks "$n" "${sizes[@]}" --ifname lo >"$out/ours-tcp.$n.$r" ||
        status=1
      GLOO_SOCKET_IFNAME=lo "$python" "$here/torch_gloo_allreduce.py" --ranks "$n" "${sizes[@]}" \
        >"$out/torch.$n.$r" || status=1
      if [ -n "$mpi" ]; then
        run_mpi=(mpirun --oversubscribe -np "$n" --bind-to none)
        [ "$(id -u)" = 0 ] && run_mpi+=(--allow-run-as-root)
        "${run_mpi[@]}" --mca btl self,vader "$mpi" "${sizes[@]}" >"$out/mpi-shm.$n.$r" || status=1
        "${run_mpi[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo "$mpi" "${sizes[@]}" \
          >"$out/mpi-tcp.$n.$r" || status=1
      fi
    done
  done
  sides="ours ours-tcp torch mpi-shm mpi-tcp"
fi

"$python" - "$out" "$rounds" "$sides" $groups <<'EOF'
import statistics
import sys

out, rounds, sides_all, groups = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]


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


for group in groups:
    # a rank count, or NODESxTASKS_PER_NODE
    nodes, _, per_node = group.partition("x")
    n = int(nodes) * int(per_node) if per_node else int(nodes)
    sides = {}
    for side in sides_all:
        per_size = {}
        for r in range(1, rounds + 1):
            table, preamble = rows(f"{out}/{side}.{group}.{r}")
            if r == 1:
                print("\n".join(preamble))
            for size, (us, wrong) in table.items():
                per_size.setdefault(size, []).append((us, wrong))
        if per_size:
            sides[side] = per_size
    names = [s for s in sides_all if s in sides]
    factor = 2.0 * (n - 1) / n
    where = f"{nodes} nodes x {per_node} ranks" if per_node else f"{n} ranks"
    print(f"# side by side, {where}: median over {rounds} round(s) of each side's median; "
          f"GB = 1e9, busbw = algbw * {factor:g}; 'x <side>' = ours' busbw / that side's")
    head = "#%13s %12s %8s %6s" % ("size(B)", "count", "type", "redop")
    for s in names:
        head += " | %10s %11s %6s" % (s + " us", s + " busbw", "#wrong")
    for s in names[1:]:
        head += " %10s" % ("x " + s)
    print(head)
    for size in sorted(set().union(*[set(sides[s]) for s in names])):
        line = " %13d %12d %8s %6s" % (size, size // 4, "float", "sum")
        busbws = {}
        for s in names:
            got = sides[s].get(size)
            if not got:
                line += " | %10s %11s %6s" % ("-", "-", "-")
                continue
            us = statistics.median(t for t, _ in got)
            wrong = sum(w for _, w in got)
            busbws[s] = size / us / 1e3 * factor
            line += " | %10.1f %11.3f %6d" % (us, busbws[s], wrong)
        for s in names[1:]:
            ok = "ours" in busbws and s in busbws and busbws[s] > 0
            line += " %10s" % ("%.2f" % (busbws["ours"] / busbws[s]) if ok else "-")
        print(line)
    print()
EOF
exit $status
