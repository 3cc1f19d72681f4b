// The GPU entry points of a build configured with -DRMSNORM_GPU=OFF (no kernels compiled in).
// They validate their arguments first, as the GPU build's do: bad arguments are reported as
// such in every build.
#include "errors.hpp"
#include "rmsnorm/rmsnorm.h"
#include "validate.hpp"

namespace {

rmsnorm_status not_built() {
    return rmsnorm::detail::fail(RMSNORM_ERROR_NO_GPU,
                                 "rmsnorm: this librmsnorm was built without its GPU kernels "
                                 "(RMSNORM_GPU=OFF); only rmsnorm_cpu_* work");
}

template <typename Args>
rmsnorm_status validate_then_not_built(const Args* args) {
    Args copy;
    const rmsnorm_status s = rmsnorm::detail::validate(args, &copy);
    return s != RMSNORM_SUCCESS ? s : not_built();
}

}  // namespace

extern "C" {
rmsnorm_status rmsnorm_forward(const rmsnorm_forward_args* args, CUstream) {
    return validate_then_not_built(args);
}
rmsnorm_status rmsnorm_fused_add_forward(const rmsnorm_forward_args* args, CUstream) {
    return validate_then_not_built(args);
}
rmsnorm_status rmsnorm_backward_workspace_size(const rmsnorm_backward_args* args, size_t* bytes) {
    if (bytes == nullptr) return rmsnorm::detail::invalid("bytes is NULL");
    return validate_then_not_built(args);
}
rmsnorm_status rmsnorm_backward(const rmsnorm_backward_args* args, void*, size_t, CUstream) {
    return validate_then_not_built(args);
}
rmsnorm_status rmsnorm_fused_add_backward(const rmsnorm_backward_args* args, void*, size_t,
                                          CUstream) {
    return validate_then_not_built(args);
}
rmsnorm_status rmsnorm_forward_quant(const rmsnorm_quant_args* args, CUstream) {
    rmsnorm::detail::QuantArgs copy;
    const rmsnorm_status s = rmsnorm::detail::validate(args, &copy);
    return s != RMSNORM_SUCCESS ? s : not_built();
}
rmsnorm_status rmsnorm_gpu_kernels(char*, size_t) { return not_built(); }
}
