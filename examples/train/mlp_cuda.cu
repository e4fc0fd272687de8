// Note [Row-major products with cuBLAS]
// The model keeps Mlp's row-major layout (x: batch x in, W1: in x hidden,
// W2: hidden x classes), so the parameters are byte-for-byte comparable with a
// CPU run. cuBLAS is column-major: the bytes of a row-major r x c matrix M are
// the column-major c x r matrix M^T (leading dimension c). So a row-major
// C = A B (m x k times k x n) is computed as the column-major C^T = B^T A^T:
// sgemm(N, N, n, m, k, B, ld n, A, ld k, C, ld n). A transposed operand of the
// row-major formula (H^T, X^T, W2^T) flips that operand's op instead.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "cuda_check.h"
#include "mlp_cuda.h"
#include "slurmddp/error.h"

namespace train {

namespace {

constexpr int kThreads = 256;  // per block; a power of two (softmax_xent reduces by halving)

// Blocks for a grid-stride loop over n elements (the loop covers any excess).
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

__device__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// m[r][c] += bias[c] over a rows x cols matrix, then the ReLU when asked, as
// Mlp's std::max(v, 0.0f) (a NaN stays NaN).
__global__ void add_bias(float* m, const float* bias, int64_t rows, int64_t cols, bool relu) {
  for (int64_t i = first_index(); i < rows * cols; i += grid_stride()) {
    float v = m[i] + bias[i % cols];
    if (relu && v < 0.0f) v = 0.0f;
    m[i] = v;
  }
}

// The ReLU's backward: no gradient where its output h is not positive.
__global__ void relu_backward(float* dh, const float* h, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    if (h[i] <= 0.0f) dh[i] = 0.0f;
  }
}

// out[c] = sum over rows r of m[r][c], adding rows in order as Mlp does, so a
// bias gradient is bitwise Mlp's for the same input.
__global__ void column_sums(const float* m, int64_t rows, int64_t cols, float* out) {
  for (int64_t c = first_index(); c < cols; c += grid_stride()) {
    float s = 0.0f;
    for (int64_t r = 0; r < rows; ++r) s += m[r * cols + c];
    out[c] = s;
  }
}

// Softmax cross-entropy, Mlp's arithmetic (float logits, double exp and sums):
// d = (softmax - onehot) / batch, and the batch's summed loss added to
// *loss_sum. One block: rows are strided over its threads and the per-thread
// losses summed by a fixed tree, so the total is the same on every run.
__global__ void softmax_xent(const float* logits, const int32_t* y, int64_t batch, int64_t classes,
                             float* dlogits, double* loss_sum) {
  __shared__ double partial[kThreads];
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double loss = 0.0;
  for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
    const float* o = logits + b * classes;
    float* d = dlogits + b * classes;
    float mx = o[0];
    for (int64_t j = 1; j < classes; ++j) mx = mx < o[j] ? o[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < classes; ++j) sum += exp(static_cast<double>(o[j] - mx));
    const int32_t label = y[b];
    loss += log(sum) - static_cast<double>(o[label] - mx);
    for (int64_t j = 0; j < classes; ++j) {
      d[j] = static_cast<float>(exp(static_cast<double>(o[j] - mx)) / sum) * inv_batch;
    }
    d[label] -= inv_batch;
  }
  partial[threadIdx.x] = loss;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += partial[0];
}

// Rows whose first maximal logit (std::max_element's choice) is the label.
__global__ void count_matches(const float* logits, const int32_t* y, int64_t rows, int64_t classes,
                              unsigned long long* correct) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    const float* o = logits + r * classes;
    int64_t best = 0;
    for (int64_t j = 1; j < classes; ++j) {
      if (o[best] < o[j]) best = j;
    }
    if (best == y[r]) atomicAdd(correct, 1ULL);
  }
}

// v = momentum * v + g; p -= lr * v (nvcc runs with -fmad=false, so each
// operation rounds as on the CPU).
__global__ void sgd(float* p, float* v, const float* g, int64_t n, float lr, float momentum) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float vi = momentum * v[i] + g[i];
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

void check_cublas(cublasStatus_t status, const char* what, const CudaWhere& w) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw slurmddp::CudaError(std::string("train: failed to ") + what + ": " +
                            cublasGetStatusName(status) + " (" + cublasGetStatusString(status) +
                            ")" + where_suffix(w));
}

// cuBLAS takes int dimensions.
int to_int(int64_t v, const char* name) {
  if (v < 0 || v > INT_MAX) {
    throw slurmddp::InvalidArgument("train: failed to build the GPU model: " + std::string(name) +
                                    " does not fit cuBLAS's int; " + name + "=" +
                                    std::to_string(v));
  }
  return static_cast<int>(v);
}

}  // namespace

void MlpCuda::Free::operator()(void* p) const {
  cudaFree(p);
}

template <typename T>
MlpCuda::DevicePtr<T> MlpCuda::allocate(size_t count, const char* what) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), what, {device_, rank_});
  return DevicePtr<T>(static_cast<T*>(p));
}

MlpCuda::MlpCuda(int64_t in, int64_t hidden, int64_t classes, uint64_t seed, int device, int rank)
    : in_(in), hidden_(hidden), classes_(classes), device_(device), rank_(rank) {
  to_int(in, "in");
  to_int(hidden, "hidden");
  to_int(classes, "classes");
  // The host model makes the initial values: both devices start identical.
  const Mlp init(in, hidden, classes, seed);
  tensors = init.tensors;
  size_ = init.params.size();
  const CudaWhere where{device_, rank_};
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "create the model's stream",
             where);
  stream_ = stream;
  try {
    cublasHandle_t blas = nullptr;
    check_cublas(cublasCreate(&blas), "create a cuBLAS handle", where);
    blas_ = blas;
    check_cublas(cublasSetStream(blas_, stream_), "put cuBLAS on the model's stream", where);
    params_ = allocate<float>(size_, "allocate the parameters");
    grads_ = allocate<float>(size_, "allocate the gradients");
    velocity_ = allocate<float>(size_, "allocate the momentum buffers");
    loss_sum_ = allocate<double>(1, "allocate the loss total");
    correct_ = allocate<unsigned long long>(1, "allocate the accuracy counter");
    const size_t bytes = size_ * sizeof(float);
    check_cuda(
        cudaMemcpyAsync(params_.get(), init.params.data(), bytes, cudaMemcpyHostToDevice, stream_),
        "copy the initial parameters to the device", where);
    check_cuda(cudaMemsetAsync(grads_.get(), 0, bytes, stream_), "clear the gradients", where);
    check_cuda(cudaMemsetAsync(velocity_.get(), 0, bytes, stream_), "clear the momentum buffers",
               where);
    check_cuda(cudaMemsetAsync(loss_sum_.get(), 0, sizeof(double), stream_), "clear the loss total",
               where);
    // GradSync's construction broadcasts the parameters on NCCL's stream,
    // which knows nothing of ours: they must be in place before it starts.
    check_cuda(cudaStreamSynchronize(stream_), "initialize the model", where);
  } catch (...) {
    release();
    throw;
  }
}

MlpCuda::~MlpCuda() {
  release();
}

void MlpCuda::release() noexcept {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // queued work uses the buffers
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  blas_ = nullptr;
  stream_ = nullptr;
}

void MlpCuda::check_launch(const char* what) {
  check_cuda(cudaGetLastError(), what, {device_, rank_});
}

void MlpCuda::sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                    const char* what) {
  const float one = 1.0f, zero = 0.0f;  // C = op(A) op(B): beta 0 never reads C
  check_cublas(
      cublasSgemm(blas_, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, a,
                  static_cast<int>(lda), b, static_cast<int>(ldb), &zero, c, static_cast<int>(ldc)),
      what, {device_, rank_});
}

void MlpCuda::reserve(int64_t rows) {
  if (rows <= rows_) return;
  to_int(rows, "rows");
  // Work queued earlier may still read the old buffers.
  check_cuda(cudaStreamSynchronize(stream_), "wait for the model's stream", {device_, rank_});
  rows_ = 0;
  x_.reset();
  y_.reset();
  hidden_act_.reset();
  logits_.reset();
  dlogits_.reset();
  dhidden_.reset();
  const auto r = static_cast<size_t>(rows);
  x_ = allocate<float>(r * static_cast<size_t>(in_), "allocate the batch's inputs");
  y_ = allocate<int32_t>(r, "allocate the batch's labels");
  hidden_act_ = allocate<float>(r * static_cast<size_t>(hidden_), "allocate the activations");
  dhidden_ = allocate<float>(r * static_cast<size_t>(hidden_), "allocate the activations");
  logits_ = allocate<float>(r * static_cast<size_t>(classes_), "allocate the logits");
  dlogits_ = allocate<float>(r * static_cast<size_t>(classes_), "allocate the logits");
  rows_ = rows;
}

void MlpCuda::upload(const float* x, const int32_t* y, int64_t batch) {
  reserve(batch);
  const CudaWhere where{device_, rank_};
  const auto rows = static_cast<size_t>(batch);
  // From pageable memory the copy is staged before the call returns, so the
  // caller may refill x and y at once.
  check_cuda(cudaMemcpyAsync(x_.get(), x, rows * static_cast<size_t>(in_) * sizeof(float),
                             cudaMemcpyHostToDevice, stream_),
             "copy the batch's inputs to the device", where);
  check_cuda(cudaMemcpyAsync(y_.get(), y, rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
             "copy the batch's labels to the device", where);
}

// Note [Row-major products with cuBLAS] for every sgemm below.
void MlpCuda::forward(int64_t batch) {
  const float* w1 = params_.get() + tensors[0].offset;
  const float* b1 = params_.get() + tensors[1].offset;
  const float* w2 = params_.get() + tensors[2].offset;
  const float* b2 = params_.get() + tensors[3].offset;
  // hidden = relu(x W1 + b1): batch x hidden
  sgemm(false, false, hidden_, batch, in_, w1, hidden_, x_.get(), in_, hidden_act_.get(), hidden_,
        "run the layer-1 SGEMM");
  add_bias<<<blocks_for(batch * hidden_), kThreads, 0, stream_>>>(hidden_act_.get(), b1, batch,
                                                                  hidden_, true);
  check_launch("launch the layer-1 bias kernel");
  // logits = hidden W2 + b2: batch x classes
  sgemm(false, false, classes_, batch, hidden_, w2, classes_, hidden_act_.get(), hidden_,
        logits_.get(), classes_, "run the layer-2 SGEMM");
  add_bias<<<blocks_for(batch * classes_), kThreads, 0, stream_>>>(logits_.get(), b2, batch,
                                                                   classes_, false);
  check_launch("launch the layer-2 bias kernel");
}

void MlpCuda::forward_backward(const float* x, const int32_t* y, int64_t batch,
                               const std::function<void(size_t)>& ready) {
  upload(x, y, batch);
  forward(batch);
  const float* w2 = params_.get() + tensors[2].offset;
  float* gw1 = grads_.get() + tensors[0].offset;
  float* gb1 = grads_.get() + tensors[1].offset;
  float* gw2 = grads_.get() + tensors[2].offset;
  float* gb2 = grads_.get() + tensors[3].offset;
  softmax_xent<<<1, kThreads, 0, stream_>>>(logits_.get(), y_.get(), batch, classes_,
                                            dlogits_.get(), loss_sum_.get());
  check_launch("launch the softmax cross-entropy kernel");
  // layer 2 first, as Mlp: gW2 = hidden^T dlogits (hidden x classes), gb2 = column sums
  sgemm(false, true, classes_, hidden_, batch, dlogits_.get(), classes_, hidden_act_.get(), hidden_,
        gw2, classes_, "run the W2-gradient SGEMM");
  column_sums<<<blocks_for(classes_), kThreads, 0, stream_>>>(dlogits_.get(), batch, classes_, gb2);
  check_launch("launch the b2-gradient kernel");
  // Queued on the stream is final for GradSync: it records an event there.
  ready(2);
  ready(3);
  // dhidden = (dlogits W2^T) masked by the ReLU: batch x hidden
  sgemm(true, false, hidden_, batch, classes_, w2, classes_, dlogits_.get(), classes_,
        dhidden_.get(), hidden_, "run the hidden-gradient SGEMM");
  relu_backward<<<blocks_for(batch * hidden_), kThreads, 0, stream_>>>(
      dhidden_.get(), hidden_act_.get(), batch * hidden_);
  check_launch("launch the ReLU backward kernel");
  // gW1 = x^T dhidden (in x hidden), gb1 = column sums
  sgemm(false, true, hidden_, in_, batch, dhidden_.get(), hidden_, x_.get(), in_, gw1, hidden_,
        "run the W1-gradient SGEMM");
  column_sums<<<blocks_for(hidden_), kThreads, 0, stream_>>>(dhidden_.get(), batch, hidden_, gb1);
  check_launch("launch the b1-gradient kernel");
  ready(0);
  ready(1);
}

double MlpCuda::take_loss_sum() {
  const CudaWhere where{device_, rank_};
  double sum = 0.0;
  check_cuda(cudaMemcpyAsync(&sum, loss_sum_.get(), sizeof sum, cudaMemcpyDeviceToHost, stream_),
             "copy the loss total to the host", where);
  check_cuda(cudaMemsetAsync(loss_sum_.get(), 0, sizeof(double), stream_), "clear the loss total",
             where);
  check_cuda(cudaStreamSynchronize(stream_), "wait for the loss total", where);
  return sum;
}

int64_t MlpCuda::count_correct(const float* x, const int32_t* y, int64_t batch) {
  const CudaWhere where{device_, rank_};
  upload(x, y, batch);
  forward(batch);
  check_cuda(cudaMemsetAsync(correct_.get(), 0, sizeof(unsigned long long), stream_),
             "clear the accuracy counter", where);
  count_matches<<<blocks_for(batch), kThreads, 0, stream_>>>(logits_.get(), y_.get(), batch,
                                                             classes_, correct_.get());
  check_launch("launch the accuracy kernel");
  unsigned long long correct = 0;
  check_cuda(
      cudaMemcpyAsync(&correct, correct_.get(), sizeof correct, cudaMemcpyDeviceToHost, stream_),
      "copy the accuracy counter to the host", where);
  check_cuda(cudaStreamSynchronize(stream_), "wait for the evaluation", where);
  return static_cast<int64_t>(correct);
}

void MlpCuda::sgd_step(float lr, float momentum) {
  const auto n = static_cast<int64_t>(size_);
  sgd<<<blocks_for(n), kThreads, 0, stream_>>>(params_.get(), velocity_.get(), grads_.get(), n, lr,
                                               momentum);
  check_launch("launch the SGD kernel");
}

std::vector<float> MlpCuda::host_params() {
  const CudaWhere where{device_, rank_};
  std::vector<float> out(size_);
  check_cuda(cudaMemcpyAsync(out.data(), params_.get(), size_ * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "copy the parameters to the host", where);
  check_cuda(cudaStreamSynchronize(stream_), "wait for the parameters", where);
  return out;
}

std::vector<float> MlpCuda::state() {
  const CudaWhere where{device_, rank_};
  std::vector<float> out(2 * size_);
  check_cuda(cudaMemcpyAsync(out.data(), params_.get(), size_ * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "copy the parameters to the host", where);
  check_cuda(cudaMemcpyAsync(out.data() + size_, velocity_.get(), size_ * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_),
             "copy the momentum buffers to the host", where);
  check_cuda(cudaStreamSynchronize(stream_), "wait for the training state", where);
  return out;
}

void MlpCuda::load_state(const std::vector<float>& state) {
  const CudaWhere where{device_, rank_};
  if (state.size() != 2 * size_) {
    throw std::invalid_argument("train: a checkpoint of " + std::to_string(state.size()) +
                                " values does not fit this model (" + std::to_string(2 * size_) +
                                "); was it written with another --hidden?");
  }
  check_cuda(cudaMemcpyAsync(params_.get(), state.data(), size_ * sizeof(float),
                             cudaMemcpyHostToDevice, stream_),
             "copy the parameters to the GPU", where);
  check_cuda(cudaMemcpyAsync(velocity_.get(), state.data() + size_, size_ * sizeof(float),
                             cudaMemcpyHostToDevice, stream_),
             "copy the momentum buffers to the GPU", where);
  check_cuda(cudaStreamSynchronize(stream_), "wait for the training state", where);
}

uint64_t MlpCuda::checksum() {
  const std::vector<float> p = host_params();
  return train::checksum(p.data(), p.size());
}

}  // namespace train
