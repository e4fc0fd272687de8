// Fashion-MNIST (and MNIST) in the IDX format, gzip-compressed as Debian's
// dataset-fashion-mnist ships it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  int64_t count = 0;
  int64_t features = 0;       // 28 * 28
  std::vector<float> images;  // count x features, normalized (mean 0, std 1)
  std::vector<int32_t> labels;
};

// Loads "<dir>/train-*" (train = true) or "<dir>/t10k-*". Throws
// std::runtime_error naming the file and what is wrong (missing: which package
// provides it).
Dataset load_fashion_mnist(const std::string& dir, bool train);

}  // namespace train
