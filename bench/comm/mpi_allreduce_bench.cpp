// The baseline of the allreduce comparison: MPI_Allreduce (float32, sum)
// under mpirun, printed in the same nccl-tests columns as
// gloo_allreduce_bench, measured the same way:
//   size(B) count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong
// Per size: untimed warm-up, then repetitions that each start from a
// barrier; a repetition's time is that of the slowest rank (MPI_MAX of the
// ranks' times), the row the median over repetitions; #wrong counts elements
// (all ranks) that differ from the closed form; any makes the exit status 1.
// The transport is mpirun's choice (e.g. --mca btl self,vader for shared
// memory, --mca btl self,tcp for TCP); allreduce_side_by_side.sh runs both.
//
// Usage: mpirun -np N mpi_allreduce_bench [--min-bytes B] [--max-bytes B]
//                                         [--factor F] [--iters R] [--warmup W]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "stats.h"

namespace {

float input(int rank, size_t i) {
  const float k = static_cast<float>(i % 7 + 1);
  return ((i % 2) ? -1.0f : 1.0f) * static_cast<float>(rank + 1) * k;
}

float expected(int n, size_t i) {
  const float k = static_cast<float>(i % 7 + 1);
  return ((i % 2) ? -1.0f : 1.0f) * k * static_cast<float>(n * (n + 1) / 2);
}

size_t arg_size(int argc, char** argv, const char* name, size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t min_bytes = arg_size(argc, argv, "--min-bytes", 4096);
  const size_t max_bytes = arg_size(argc, argv, "--max-bytes", size_t{256} << 20);
  const size_t factor = std::max<size_t>(2, arg_size(argc, argv, "--factor", 2));
  const size_t iters = arg_size(argc, argv, "--iters", 0);
  const long warmup = static_cast<long>(arg_size(argc, argv, "--warmup", size_t(-1)));

  slurmddp::bench::TableOptions columns;
  columns.ranks = n;
  columns.time_decimals = 1;
  columns.bw_decimals = 3;
  slurmddp::bench::Table table(columns);
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string first(version, strcspn(version, "\n,"));
    std::printf("# MPI allreduce benchmark (bench/comm/mpi_allreduce_bench): %s, %d ranks\n",
                first.c_str(), n);
    std::printf(
        "# per size: untimed warm-up, repetitions from a barrier, time = median over "
        "repetitions of the slowest rank; GB = 1e9, busbw = algbw * 2(n-1)/n\n");
    table.print_header();
  }
  long long total_wrong = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> src(count), buf(count);
    for (size_t i = 0; i < count; ++i) src[i] = input(rank, i);
    const int reps = iters > 0
                         ? static_cast<int>(iters)
                         : static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 200));
    const int warm = warmup >= 0 ? static_cast<int>(warmup) : (bytes >= (size_t{64} << 20) ? 1 : 3);
    for (int w = 0; w < warm; ++w) {
      std::memcpy(buf.data(), src.data(), bytes);
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    std::vector<double> us(static_cast<size_t>(reps));
    for (int r = 0; r < reps; ++r) {
      std::memcpy(buf.data(), src.data(), bytes);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      double mine = (MPI_Wtime() - t0) * 1e6, slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      us[static_cast<size_t>(r)] = slowest;
    }
    long long wrong = 0, all_wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += buf[i] != expected(n, i);
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    total_wrong += all_wrong;
    if (rank == 0) {
      slurmddp::bench::TableRow row;
      row.bytes = bytes;
      row.count = count;
      row.type = "float";
      row.redop = "sum";
      row.time_us = slurmddp::bench::median_of(us);
      row.wrong = all_wrong;
      table.print_row(row);
    }
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
