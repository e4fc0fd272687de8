#include "mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace train {

namespace {

// Deterministic uniform numbers in [-bound, bound) (splitmix64).
struct Rng {
  uint64_t s;
  double uniform() {
    s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 53);
  }
};

}  // namespace

Mlp::Mlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed)
    : in_(in), hidden_(hidden), classes_(classes) {
  auto add = [&](const char* name, int64_t count) {
    tensors.push_back(ParamTensor{name, params.size(), static_cast<size_t>(count)});
    params.resize(params.size() + static_cast<size_t>(count));
  };
  add("fc1.weight", in * hidden);
  add("fc1.bias", hidden);
  add("fc2.weight", hidden * classes);
  add("fc2.bias", classes);
  grads.assign(params.size(), 0.0f);
  velocity_.assign(params.size(), 0.0f);
  // PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  Rng rng{seed};
  for (size_t t = 0; t < tensors.size(); ++t) {
    double bound = 1.0 / std::sqrt(static_cast<double>(t < 2 ? in : hidden));
    for (size_t i = 0; i < tensors[t].count; ++i) {
      params[tensors[t].offset + i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    }
  }
}

void Mlp::forward(const float* x, int64_t batch) {
  const float* w1 = params.data() + tensors[0].offset;
  const float* b1 = params.data() + tensors[1].offset;
  const float* w2 = params.data() + tensors[2].offset;
  const float* b2 = params.data() + tensors[3].offset;
  hidden_act_.assign(static_cast<size_t>(batch * hidden_), 0.0f);
  logits_.assign(static_cast<size_t>(batch * classes_), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    float* h = hidden_act_.data() + b * hidden_;
    std::copy(b1, b1 + hidden_, h);
    const float* xr = x + b * in_;
    for (int64_t k = 0; k < in_; ++k) {
      const float xv = xr[k];
      const float* wr = w1 + k * hidden_;
      for (int64_t j = 0; j < hidden_; ++j) h[j] += xv * wr[j];
    }
    for (int64_t j = 0; j < hidden_; ++j) h[j] = std::max(h[j], 0.0f);
    float* o = logits_.data() + b * classes_;
    std::copy(b2, b2 + classes_, o);
    for (int64_t k = 0; k < hidden_; ++k) {
      const float hv = h[k];
      const float* wr = w2 + k * classes_;
      for (int64_t j = 0; j < classes_; ++j) o[j] += hv * wr[j];
    }
  }
}

double Mlp::forward_backward(const float* x, const int32_t* y, int64_t batch,
                             const std::function<void(size_t)>& ready) {
  forward(x, batch);
  const float* w2 = params.data() + tensors[2].offset;
  float* gw1 = grads.data() + tensors[0].offset;
  float* gb1 = grads.data() + tensors[1].offset;
  float* gw2 = grads.data() + tensors[2].offset;
  float* gb2 = grads.data() + tensors[3].offset;
  std::fill(grads.begin(), grads.end(), 0.0f);
  dlogits_.assign(static_cast<size_t>(batch * classes_), 0.0f);
  double loss = 0.0;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  // softmax cross-entropy: d(mean loss)/d(logits) = (softmax - onehot) / batch
  for (int64_t b = 0; b < batch; ++b) {
    const float* o = logits_.data() + b * classes_;
    float* d = dlogits_.data() + b * classes_;
    float mx = *std::max_element(o, o + classes_);
    double sum = 0.0;
    for (int64_t j = 0; j < classes_; ++j) sum += std::exp(static_cast<double>(o[j] - mx));
    const int32_t label = y[b];
    loss += std::log(sum) - static_cast<double>(o[label] - mx);
    for (int64_t j = 0; j < classes_; ++j) {
      d[j] = static_cast<float>(std::exp(static_cast<double>(o[j] - mx)) / sum) * inv_batch;
    }
    d[label] -= inv_batch;
  }
  // layer 2: gradients of W2 and b2 are final first
  for (int64_t b = 0; b < batch; ++b) {
    const float* h = hidden_act_.data() + b * hidden_;
    const float* d = dlogits_.data() + b * classes_;
    for (int64_t k = 0; k < hidden_; ++k) {
      const float hv = h[k];
      if (hv == 0.0f) continue;
      float* g = gw2 + k * classes_;
      for (int64_t j = 0; j < classes_; ++j) g[j] += hv * d[j];
    }
    for (int64_t j = 0; j < classes_; ++j) gb2[j] += d[j];
  }
  ready(2);
  ready(3);
  // back through ReLU into layer 1
  dhidden_.assign(static_cast<size_t>(batch * hidden_), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    const float* h = hidden_act_.data() + b * hidden_;
    const float* d = dlogits_.data() + b * classes_;
    float* dh = dhidden_.data() + b * hidden_;
    for (int64_t k = 0; k < hidden_; ++k) {
      if (h[k] <= 0.0f) continue;
      const float* wr = w2 + k * classes_;
      float s = 0.0f;
      for (int64_t j = 0; j < classes_; ++j) s += d[j] * wr[j];
      dh[k] = s;
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const float* xr = x + b * in_;
    const float* dh = dhidden_.data() + b * hidden_;
    for (int64_t k = 0; k < in_; ++k) {
      const float xv = xr[k];
      float* g = gw1 + k * hidden_;
      for (int64_t j = 0; j < hidden_; ++j) g[j] += xv * dh[j];
    }
    for (int64_t j = 0; j < hidden_; ++j) gb1[j] += dh[j];
  }
  ready(0);
  ready(1);
  loss_sum_ += loss;
  return loss;
}

double Mlp::take_loss_sum() {
  const double sum = loss_sum_;
  loss_sum_ = 0.0;
  return sum;
}

int64_t Mlp::count_correct(const float* x, const int32_t* y, int64_t batch) {
  forward(x, batch);
  int64_t correct = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const float* o = logits_.data() + b * classes_;
    correct += (std::max_element(o, o + classes_) - o) == y[b];
  }
  return correct;
}

void Mlp::sgd_step(float lr, float momentum) {
  for (size_t i = 0; i < params.size(); ++i) {
    velocity_[i] = momentum * velocity_[i] + grads[i];
    params[i] -= lr * velocity_[i];
  }
}

std::vector<float> Mlp::state() const {
  std::vector<float> out(params);
  out.insert(out.end(), velocity_.begin(), velocity_.end());
  return out;
}

void Mlp::load_state(const std::vector<float>& state) {
  if (state.size() != params.size() + velocity_.size()) {
    throw std::invalid_argument("train: a checkpoint of " + std::to_string(state.size()) +
                                " values does not fit this model (" +
                                std::to_string(params.size() + velocity_.size()) +
                                "); was it written with another --hidden?");
  }
  std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(params.size()),
            params.begin());
  std::copy(state.begin() + static_cast<std::ptrdiff_t>(params.size()), state.end(),
            velocity_.begin());
}

uint64_t Mlp::checksum() const {
  return train::checksum(params.data(), params.size());
}

uint64_t checksum(const float* data, size_t count) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < count * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace train
