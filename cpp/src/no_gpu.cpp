// The GPU entry points of a build configured with -DRMSNORM_GPU=OFF (no kernels compiled in).
#include "errors.hpp"
#include "rmsnorm/rmsnorm.h"

namespace {
rmsnorm_status not_built() {
    return rmsnorm::detail::fail(RMSNORM_ERROR_NO_GPU,
                                 "rmsnorm: this librmsnorm was built without its GPU kernels "
                                 "(RMSNORM_GPU=OFF); only rmsnorm_cpu_* work");
}
}  // namespace

extern "C" {
rmsnorm_status rmsnorm_forward(const rmsnorm_forward_args*, CUstream) { return not_built(); }
rmsnorm_status rmsnorm_fused_add_forward(const rmsnorm_forward_args*, CUstream) {
    return not_built();
}
rmsnorm_status rmsnorm_backward_workspace_size(const rmsnorm_backward_args*, size_t*) {
    return not_built();
}
rmsnorm_status rmsnorm_backward(const rmsnorm_backward_args*, void*, size_t, CUstream) {
    return not_built();
}
rmsnorm_status rmsnorm_fused_add_backward(const rmsnorm_backward_args*, void*, size_t, CUstream) {
    return not_built();
}
rmsnorm_status rmsnorm_gpu_kernels(char*, size_t) { return not_built(); }
}
