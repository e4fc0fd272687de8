// Statistics every benchmark quotes: the median of repeated samples and their
// spread (an even count takes the mean of the two middle samples; an empty
// list gives zeros), and the table of rows in nccl-tests' columns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <utility>
#include <vector>

namespace slurmddp::bench {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

inline Spread spread_of(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  s.median = median_of(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

// ---- Rows in nccl-tests' columns
//
//   size(B) count type redop [root] time(us) algbw(GB/s) busbw(GB/s) #wrong [extra...]
//
// GB = 1e9; algbw = size / time; busbw = algbw * the collective's factor
// (bus_factor). The header line starts with '#', rows with a space, so that
// parsers split rows on white space and skip '#' lines.

// Bytes per microsecond in GB/s (GB = 1e9).
inline double gbps(double bytes, double time_us) {
  return time_us > 0 ? bytes / time_us / 1e3 : 0.0;
}

enum class Collective { kAllreduce, kAllgather, kReduceScatter, kBroadcast };

// nccl-tests' bus bandwidth factor over `ranks`: 2(n-1)/n for allreduce,
// (n-1)/n for allgather and reduce-scatter, 1 for broadcast.
inline double bus_factor(Collective c, int ranks) {
  if (ranks <= 1) return c == Collective::kBroadcast ? 1.0 : 0.0;
  const double n = ranks;
  switch (c) {
    case Collective::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
      return (n - 1) / n;
    case Collective::kBroadcast:
      return 1.0;
  }
  return 0.0;
}

// A column after #wrong (e.g. a baseline's time), printed with printf's
// "%<width>.<decimals>f".
struct ExtraColumn {
  const char* header;
  int width;
  int decimals;
};

struct TableOptions {
  Collective collective = Collective::kAllreduce;
  int ranks = 1;
  bool root = false;      // print the root column (rooted collectives)
  int time_decimals = 2;  // time(us)
  int bw_decimals = 2;    // algbw, busbw
  std::vector<ExtraColumn> extra;
};

struct TableRow {
  size_t bytes = 0;
  size_t count = 0;
  const char* type = "";
  const char* redop = "";
  int root = -1;
  double time_us = 0;
  long long wrong = 0;
  std::vector<double> extra;  // one value per ExtraColumn
};

// Prints the header and rows to stdout (flushed after each line) and keeps
// what nccl-tests' trailer reports: the average busbw and the wrong values.
class Table {
 public:
  explicit Table(TableOptions o) : o_(std::move(o)) {}

  double bus_factor() const { return bench::bus_factor(o_.collective, o_.ranks); }

  void print_header() const {
    std::printf("#%13s %12s %9s %7s", "size(B)", "count", "type", "redop");
    if (o_.root) std::printf(" %6s", "root");
    std::printf(" %12s %12s %12s %8s", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    for (const ExtraColumn& c : o_.extra) std::printf(" %*s", c.width, c.header);
    std::printf("\n");
    std::fflush(stdout);
  }

  void print_row(const TableRow& r) {
    const double algbw = gbps(static_cast<double>(r.bytes), r.time_us);
    const double busbw = algbw * bus_factor();
    busbw_sum_ += busbw;
    ++rows_;
    wrong_ += r.wrong;
    std::printf(" %13zu %12zu %9s %7s", r.bytes, r.count, r.type, r.redop);
    if (o_.root) std::printf(" %6d", r.root);
    std::printf(" %12.*f %12.*f %12.*f %8lld", o_.time_decimals, r.time_us, o_.bw_decimals, algbw,
                o_.bw_decimals, busbw, r.wrong);
    for (size_t i = 0; i < o_.extra.size(); ++i) {
      const double v = i < r.extra.size() ? r.extra[i] : 0.0;
      std::printf(" %*.*f", o_.extra[i].width, o_.extra[i].decimals, v);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // nccl-tests' trailer: "# Avg bus bandwidth : ..." and "# Wrong values : ...".
  void print_trailer() const {
    std::printf("# Avg bus bandwidth    : %.4f\n", rows_ ? busbw_sum_ / rows_ : 0.0);
    std::printf("# Wrong values         : %lld %s\n", wrong_, wrong_ ? "FAILED" : "OK");
    std::fflush(stdout);
  }

  long long wrong() const { return wrong_; }

 private:
  TableOptions o_;
  double busbw_sum_ = 0;
  int rows_ = 0;
  long long wrong_ = 0;
};

}  // namespace slurmddp::bench
