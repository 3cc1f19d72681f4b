// The op library without CUDA kernels: a CPU build of PyTorch (CUDA tensors cannot exist), or
// RMSNORM_GPU=OFF (CUDA tensors take the Python launcher).
#include <string>

#include "compiled.hpp"

namespace rmsnorm_torch {

bool compiled_kernels_built() { return false; }

std::string compiled_kernels_report(int64_t) {
#ifdef RMSNORM_TORCH_CUDA_BUILD
    return "none: the op library was built without its CUDA kernels (RMSNORM_GPU=OFF)";
#else
    return "none: this PyTorch is a CPU build, so the op library was built without its CUDA "
           "kernels";
#endif
}

}  // namespace rmsnorm_torch
