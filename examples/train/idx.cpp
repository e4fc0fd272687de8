#include "idx.h"

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace train {

namespace {

std::vector<uint8_t> gunzip(const std::string& path) {
  if (!std::ifstream(path).good()) {
    throw std::runtime_error("train: failed to open dataset file " + path +
                             ": missing; install the Debian package dataset-fashion-mnist or pass "
                             "--data=DIR (a directory with the four *-ubyte.gz files)");
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("train: failed to open dataset file " + path);
  std::unique_ptr<gzFile_s, decltype(&gzclose)> owner(f, gzclose);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  if (n < 0) throw std::runtime_error("train: failed to decompress " + path);
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t{b[off]} << 24) | (uint32_t{b[off + 1]} << 16) | (uint32_t{b[off + 2]} << 8) |
         uint32_t{b[off + 3]};
}

// Returns the dimensions; checks magic (unsigned bytes) and size.
std::vector<uint32_t> header(const std::vector<uint8_t>& b, const std::string& path, int ndim) {
  if (b.size() < 4 + 4 * static_cast<size_t>(ndim) || b[0] != 0 || b[1] != 0 || b[2] != 0x08 ||
      b[3] != ndim) {
    throw std::runtime_error("train: failed to read " + path + ": not an IDX file of " +
                             std::to_string(ndim) + "-d unsigned bytes");
  }
  std::vector<uint32_t> dims;
  size_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    dims.push_back(be32(b, 4 + 4 * static_cast<size_t>(i)));
    total *= dims.back();
  }
  if (b.size() != 4 + 4 * static_cast<size_t>(ndim) + total) {
    throw std::runtime_error("train: failed to read " + path + ": truncated (" +
                             std::to_string(b.size()) + " bytes)");
  }
  return dims;
}

}  // namespace

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  std::string ipath = prefix + "-images-idx3-ubyte.gz", lpath = prefix + "-labels-idx1-ubyte.gz";
  auto ib = gunzip(ipath), lb = gunzip(lpath);
  auto idims = header(ib, ipath, 3), ldims = header(lb, lpath, 1);
  if (idims[0] != ldims[0]) {
    throw std::runtime_error("train: " + ipath + " has " + std::to_string(idims[0]) +
                             " images but " + lpath + " has " + std::to_string(ldims[0]) +
                             " labels");
  }
  Dataset d;
  d.count = idims[0];
  d.features = int64_t{idims[1]} * idims[2];
  d.images.resize(static_cast<size_t>(d.count * d.features));
  // Normalization constants of Fashion-MNIST's training set (mean 0.2860, std 0.3530).
  const float mean = 0.2860f, inv_std = 1.0f / 0.3530f;
  const uint8_t* px = ib.data() + 16;
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = (px[i] / 255.0f - mean) * inv_std;
  d.labels.resize(static_cast<size_t>(d.count));
  for (int64_t i = 0; i < d.count; ++i) {
    d.labels[static_cast<size_t>(i)] = lb[8 + static_cast<size_t>(i)];
    if (d.labels[static_cast<size_t>(i)] > 9) {
      throw std::runtime_error("train: " + lpath + ": label " +
                               std::to_string(d.labels[static_cast<size_t>(i)]) + " at " +
                               std::to_string(i) + " is not a class 0-9");
    }
  }
  return d;
}

}  // namespace train
