// A two-layer perceptron (in -> hidden, ReLU -> classes) with softmax
// cross-entropy, on the CPU. Parameters and gradients each live in one
// contiguous float buffer; `tensors` describes the four parameter tensors in
// registration order (W1, b1, W2, b2), which is what gradient synchronization
// registers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace train {

struct ParamTensor {
  std::string name;
  size_t offset = 0;  // in floats, into params/grads
  size_t count = 0;
};

class Mlp {
 public:
  Mlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed);

  std::vector<float> params;
  std::vector<float> grads;
  std::vector<ParamTensor> tensors;

  // Forward and backward on a batch of `batch` rows: `grads` becomes the
  // gradient of the mean loss over the batch. `ready(i)` is called as soon as
  // tensor i's gradient is final (backward order: W2, b2, then W1, b1), so
  // communication can start while the rest is computed. Returns the summed
  // (not averaged) loss of the batch, which is also added to take_loss_sum().
  double forward_backward(const float* x, const int32_t* y, int64_t batch,
                          const std::function<void(size_t)>& ready);

  // The summed loss of every batch since the last call (MlpCuda's interface,
  // whose loss stays on the GPU between calls).
  double take_loss_sum();

  // Number of rows whose arg-max prediction equals the label.
  int64_t count_correct(const float* x, const int32_t* y, int64_t batch);

  // SGD with momentum, PyTorch's convention: v = momentum * v + g; p -= lr * v.
  void sgd_step(float lr, float momentum);

  // FNV-1a of the parameters' bytes (train::checksum): equal on every rank iff
  // they are identical.
  uint64_t checksum() const;
  const std::vector<float>& host_params() const { return params; }

  // The training state for a checkpoint: the parameters, then the momentum
  // buffers. load_state() takes what state() gave (same sizes, or it throws).
  std::vector<float> state() const;
  void load_state(const std::vector<float>& state);

 private:
  void forward(const float* x, int64_t batch);
  int64_t in_, hidden_, classes_;
  std::vector<float> hidden_act_, logits_, dlogits_, dhidden_, velocity_;
  double loss_sum_ = 0.0;
};

// FNV-1a over the bytes of `count` floats: the parameter checksum of both
// models, so that CPU and GPU runs print comparable values.
uint64_t checksum(const float* data, size_t count);

}  // namespace train
