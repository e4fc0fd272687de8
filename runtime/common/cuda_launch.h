// Reporting a kernel launch's own error without stealing anyone else's.
// Header-only (used by the .cu files of comm and grad_sync).
//
// Note [Launch errors and pending errors]
// A kernel launch reports its errors only through the runtime's per-thread
// "last error", where an error of an earlier runtime call of the same thread
// (the user's, not ours) may already wait for its owner. Reading it with
// cudaGetLastError() after our launch would report that error as the
// launch's (breaking the communicator or the GradSync over someone else's
// mistake) and clear it before its owner looked. So the launch peeks first:
//  - nothing pending: whatever the last error is afterwards is the launch's,
//    and is consumed (cudaGetLastError) so that it does not leak to the user;
//  - an error pending: it is not ours and stays pending; only a last error
//    that differs from it after the launch is reported (and consumed) as ours.
// Residual ambiguity: the runtime keeps one last-error slot per thread. A
// launch failing with the same code as the pending error cannot be told
// apart and counts as a success; a sticky error (a corrupted context) then
// fails our next CUDA call anyway (the event record after the kernel). A
// launch failing with another code overwrites the pending error: ours is
// reported, the user's is lost (the runtime cannot restore it).
#pragma once

#include <cuda_runtime_api.h>

namespace slurmddp::cuda_util {

// The launch's own error, from the last error before and after it (pure).
constexpr cudaError_t launch_error(cudaError_t pending_before, cudaError_t after) {
  return after == pending_before ? cudaSuccess : after;
}

// Call right before a launch: the error already pending (not ours).
inline cudaError_t pending_error() {
  return cudaPeekAtLastError();
}

// Call right after the launch with pending_error()'s answer: the launch's own
// error (cudaSuccess when it worked), consumed; a pending error that was there
// before stays pending.
inline cudaError_t finish_launch(cudaError_t pending_before) {
  const cudaError_t own = launch_error(pending_before, cudaPeekAtLastError());
  if (own != cudaSuccess) (void)cudaGetLastError();
  return own;
}

}  // namespace slurmddp::cuda_util
