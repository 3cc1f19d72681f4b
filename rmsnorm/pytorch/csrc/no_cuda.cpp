// The op library of a CPU build of PyTorch: CUDA tensors cannot exist, nothing is compiled.
#include <string>

#include "compiled.hpp"

namespace rmsnorm_torch {

std::string compiled_kernels_report(int64_t) {
    return "none: this PyTorch is a CPU build, so the op library was built without its CUDA "
           "kernels";
}

}  // namespace rmsnorm_torch
