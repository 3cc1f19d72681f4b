// librmsnorm: a thin C++ layer over the C API (rmsnorm.h). Failures become rmsnorm::Error
// exceptions carrying the status and the library's message; it owns nothing.
#pragma once

#include <stdexcept>
#include <string>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm {

class Error : public std::runtime_error {
 public:
    Error(rmsnorm_status status, const std::string& message)
        : std::runtime_error(message), status_(status) {}
    rmsnorm_status status() const noexcept { return status_; }

 private:
    rmsnorm_status status_;
};

// Throws rmsnorm::Error unless status is RMSNORM_SUCCESS.
inline void check(rmsnorm_status status) {
    if (status != RMSNORM_SUCCESS) {
        throw Error(status,
                    std::string(rmsnorm_status_string(status)) + ": " + rmsnorm_last_error());
    }
}

// Argument structs with struct_size set and the optional parts empty.
inline rmsnorm_forward_args forward_args() {
    rmsnorm_forward_args args{};
    args.struct_size = sizeof(args);
    args.eps = 1e-6f;
    return args;
}

inline rmsnorm_backward_args backward_args() {
    rmsnorm_backward_args args{};
    args.struct_size = sizeof(args);
    return args;
}

// The forward of args.forward quantized (set out, format, scale_mode and scales; per-group
// also group_size and the scale strides).
inline rmsnorm_quant_args quant_args(const rmsnorm_forward_args& forward) {
    rmsnorm_quant_args args{};
    args.struct_size = sizeof(args);
    args.forward = &forward;
    return args;
}

// GPU: the C entry points, throwing on failure.
inline void forward(const rmsnorm_forward_args& args, CUstream stream) {
    check(rmsnorm_forward(&args, stream));
}
inline void fused_add_forward(const rmsnorm_forward_args& args, CUstream stream) {
    check(rmsnorm_fused_add_forward(&args, stream));
}
inline void forward_quant(const rmsnorm_quant_args& args, CUstream stream) {
    check(rmsnorm_forward_quant(&args, stream));
}
inline size_t backward_workspace_size(const rmsnorm_backward_args& args) {
    size_t bytes = 0;
    check(rmsnorm_backward_workspace_size(&args, &bytes));
    return bytes;
}
inline void backward(const rmsnorm_backward_args& args, void* workspace, size_t workspace_bytes,
                     CUstream stream) {
    check(rmsnorm_backward(&args, workspace, workspace_bytes, stream));
}
inline void fused_add_backward(const rmsnorm_backward_args& args, void* workspace,
                               size_t workspace_bytes, CUstream stream) {
    check(rmsnorm_fused_add_backward(&args, workspace, workspace_bytes, stream));
}

inline void cpu_forward(const rmsnorm_forward_args& args) { check(rmsnorm_cpu_forward(&args)); }
inline void cpu_backward(const rmsnorm_backward_args& args) { check(rmsnorm_cpu_backward(&args)); }
inline void cpu_forward_quant(const rmsnorm_quant_args& args) {
    check(rmsnorm_cpu_forward_quant(&args));
}

}  // namespace rmsnorm
