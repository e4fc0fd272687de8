// Statistics every benchmark quotes: the median of repeated samples and their
// spread. (An even count takes the mean of the two middle samples; an empty
// list gives zeros.)
#pragma once

#include <algorithm>
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

}  // namespace slurmddp::bench
