// Parameter lists (registration order, element counts) of two reference
// models, as PyTorch registers them: torchvision's ResNet-50 (161 tensors,
// 25,557,032 parameters) and Hugging Face's BERT-base encoder with pooler
// (199 tensors, 109,482,240 parameters).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace slurmddp::bench {

struct ParamSpec {
  std::string name;
  size_t count;
};

inline std::vector<ParamSpec> resnet50() {
  std::vector<ParamSpec> p;
  auto conv = [&](const std::string& n, size_t out, size_t in, size_t k) {
    p.push_back({n + ".weight", out * in * k * k});
  };
  auto bn = [&](const std::string& n, size_t c) {
    p.push_back({n + ".weight", c});
    p.push_back({n + ".bias", c});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  const size_t blocks[] = {3, 4, 6, 3};
  const size_t widths[] = {64, 128, 256, 512};
  size_t in = 64;
  for (size_t layer = 0; layer < 4; ++layer) {
    const size_t w = widths[layer];
    for (size_t b = 0; b < blocks[layer]; ++b) {
      const std::string n = "layer" + std::to_string(layer + 1) + "." + std::to_string(b);
      conv(n + ".conv1", w, in, 1);
      bn(n + ".bn1", w);
      conv(n + ".conv2", w, w, 3);
      bn(n + ".bn2", w);
      conv(n + ".conv3", w * 4, w, 1);
      bn(n + ".bn3", w * 4);
      if (b == 0) {
        conv(n + ".downsample.0", w * 4, in, 1);
        bn(n + ".downsample.1", w * 4);
      }
      in = w * 4;
    }
  }
  p.push_back({"fc.weight", 1000 * 2048});
  p.push_back({"fc.bias", 1000});
  return p;
}

inline std::vector<ParamSpec> bert_base() {
  const size_t h = 768;
  const size_t ff = 3072;
  std::vector<ParamSpec> p;
  p.push_back({"embeddings.word_embeddings.weight", 30522 * h});
  p.push_back({"embeddings.position_embeddings.weight", 512 * h});
  p.push_back({"embeddings.token_type_embeddings.weight", 2 * h});
  p.push_back({"embeddings.LayerNorm.weight", h});
  p.push_back({"embeddings.LayerNorm.bias", h});
  for (int l = 0; l < 12; ++l) {
    const std::string n = "encoder.layer." + std::to_string(l);
    for (const char* m : {"query", "key", "value"}) {
      p.push_back({n + ".attention.self." + m + ".weight", h * h});
      p.push_back({n + ".attention.self." + m + ".bias", h});
    }
    p.push_back({n + ".attention.output.dense.weight", h * h});
    p.push_back({n + ".attention.output.dense.bias", h});
    p.push_back({n + ".attention.output.LayerNorm.weight", h});
    p.push_back({n + ".attention.output.LayerNorm.bias", h});
    p.push_back({n + ".intermediate.dense.weight", ff * h});
    p.push_back({n + ".intermediate.dense.bias", ff});
    p.push_back({n + ".output.dense.weight", h * ff});
    p.push_back({n + ".output.dense.bias", h});
    p.push_back({n + ".output.LayerNorm.weight", h});
    p.push_back({n + ".output.LayerNorm.bias", h});
  }
  p.push_back({"pooler.dense.weight", h * h});
  p.push_back({"pooler.dense.bias", h});
  return p;
}

inline std::vector<ParamSpec> model_by_name(const std::string& name) {
  if (name == "resnet50") return resnet50();
  if (name == "bert") return bert_base();
  return {};
}

inline size_t total_count(const std::vector<ParamSpec>& p) {
  size_t n = 0;
  for (const auto& s : p) n += s.count;
  return n;
}

}  // namespace slurmddp::bench
