// The model of mlp.h on one CUDA device: same math, same parameter layout
// (`tensors`: W1, b1, W2, b2 in one buffer) and the same initialization (made
// by Mlp on the host and copied over), so a CPU and a GPU run start from
// identical parameters. Parameters, gradients, momentum, activations and the
// batch live in device memory; the matrix products are cuBLAS SGEMMs (full
// FP32: the default math mode, no TF32), the rest small kernels.
//
// Streams: every copy, kernel and cuBLAS call runs on stream(), in issue
// order, and the host never waits for the GPU during a training step. Give
// stream() to GradSync (GradSyncOptions::cuda_stream): it orders its bucket
// copies after the work queued on it when a gradient is marked ready, and
// orders the stream after the averaged gradients' copies back in wait(), so
// sgd_step() after wait() reads averages.
//
// Errors: every CUDA and cuBLAS failure throws slurmddp::CudaError, e.g.
// "train: failed to run the layer-1 SGEMM: CUBLAS_STATUS_EXECUTION_FAILED
// (the GPU program failed to execute); device=0, rank=3". Not thread-safe.
//
// This header needs no CUDA headers, so main.cpp stays plain C++.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mlp.h"

struct CUstream_st;
struct cublasContext;

namespace train {

class MlpCuda {
 public:
  // On the current CUDA device (the caller selected `device` with
  // cudaSetDevice); `rank` names this process in error messages.
  MlpCuda(int64_t in, int64_t hidden, int64_t classes, uint64_t seed, int device, int rank);
  ~MlpCuda();  // waits for the stream, then frees everything
  MlpCuda(const MlpCuda&) = delete;
  MlpCuda& operator=(const MlpCuda&) = delete;

  std::vector<ParamTensor> tensors;  // as Mlp's: offsets into params()/grads()

  float* params() const { return params_.get(); }  // device memory
  float* grads() const { return grads_.get(); }    // device memory
  CUstream_st* stream() const { return stream_; }

  // Mlp::forward_backward on the GPU. `x` and `y` are host memory (copied to
  // the device on the stream; they may be reused when this returns). ready(i)
  // is called once tensor i's gradient is queued on the stream, in Mlp's
  // order (W2, b2, then W1, b1). The batch's summed loss is added on the
  // device to a total read by take_loss_sum(), so no step waits for the GPU.
  void forward_backward(const float* x, const int32_t* y, int64_t batch,
                        const std::function<void(size_t)>& ready);

  // The summed loss of every batch since the last call (waits for the GPU).
  double take_loss_sum();

  // Number of rows whose arg-max prediction equals the label (first maximum,
  // as std::max_element). Host inputs; waits for the GPU.
  int64_t count_correct(const float* x, const int32_t* y, int64_t batch);

  // SGD with momentum, PyTorch's convention: v = momentum * v + g; p -= lr * v.
  void sgd_step(float lr, float momentum);

  // The parameters copied to the host (waits for the GPU).
  std::vector<float> host_params();

  // Mlp::state() and load_state() through the host (wait for the GPU).
  std::vector<float> state();
  void load_state(const std::vector<float>& state);

  // Mlp::checksum's definition (train::checksum) over host_params().
  uint64_t checksum();

 private:
  struct Free {
    void operator()(void* p) const;
  };
  template <typename T>
  using DevicePtr = std::unique_ptr<T, Free>;

  template <typename T>
  DevicePtr<T> allocate(size_t count, const char* what);
  void reserve(int64_t rows);  // activations and batch buffers for `rows` rows
  void upload(const float* x, const int32_t* y, int64_t batch);
  void forward(int64_t batch);
  void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
             int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, const char* what);
  void check_launch(const char* what);
  void release() noexcept;  // the stream and the cuBLAS handle

  int64_t in_, hidden_, classes_;
  int device_, rank_;
  size_t size_ = 0;  // parameters, in floats
  CUstream_st* stream_ = nullptr;
  cublasContext* blas_ = nullptr;
  DevicePtr<float> params_, grads_, velocity_;
  DevicePtr<double> loss_sum_;
  DevicePtr<unsigned long long> correct_;
  int64_t rows_ = 0;  // capacity of the buffers below, in rows
  DevicePtr<float> x_, hidden_act_, logits_, dlogits_, dhidden_;
  DevicePtr<int32_t> y_;
};

}  // namespace train
