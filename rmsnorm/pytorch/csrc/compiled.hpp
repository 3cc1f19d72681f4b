// Whether CUDA tensors take librmsnorm's compiled kernels, and the report of what serves them.
#pragma once

#include <cstdint>
#include <string>

namespace rmsnorm_torch {

// True unless use_compiled_kernels(False) switched them off (RMSNORM_KERNELS=triton at import).
bool compiled_enabled();
// Sets it; returns the previous value.
bool set_compiled_enabled(bool enabled);
// Whether this op library was built with librmsnorm's CUDA kernels (not with a CPU build of
// PyTorch, nor with RMSNORM_GPU=OFF): what can serve CUDA tensors, whatever the switch above.
bool compiled_kernels_built();
// "sm_90 cubins" (librmsnorm's rmsnorm_gpu_kernels for the device), or why no compiled kernel
// serves CUDA tensors in this build.
std::string compiled_kernels_report(int64_t device);

}  // namespace rmsnorm_torch
