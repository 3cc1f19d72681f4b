// CUDA runtime failures as exceptions, so that setup code reads straight through and main
// reports the call that failed.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace rmsnorm_bench {

class CudaError : public std::runtime_error {
 public:
    CudaError(cudaError_t code, const std::string& what)
        : std::runtime_error(what + " failed: " + cudaGetErrorName(code) + " (" +
                             cudaGetErrorString(code) + ")"),
          code_(code) {}
    cudaError_t code() const noexcept { return code_; }

 private:
    cudaError_t code_;
};

// Throws CudaError naming `what` unless code is cudaSuccess.
inline void cuda_check(cudaError_t code, const char* what) {
    if (code != cudaSuccess) throw CudaError(code, what);
}

}  // namespace rmsnorm_bench
