// Argument checks shared by every entry point (CPU and GPU): a status and a message naming the
// argument. Entry points work on validate's copy of the arguments, whose enum fields are known
// to hold enumerators.
#pragma once

#include <cstddef>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm::detail {

// The dtype of y the contract gives: llama promotes the norm input's dtype with the weight's
// (as PyTorch's promote_types), gemma keeps the norm input's.
rmsnorm_dtype output_dtype(rmsnorm_dtype norm_dtype, const void* weight, rmsnorm_dtype weight_dtype,
                           rmsnorm_casting_mode mode);

// Copies *args to *out after checking what must come before anything else reads a field:
// args not NULL, struct_size, and every enum field the call uses holding an enumerator (read
// as an integer: a C caller may pass any value). In the copy, the dtypes the call ignores
// (weight_dtype without a weight, the fused add's rows without a residual) are x's, so that
// nothing downstream loads a stray value.
rmsnorm_status read_args(const rmsnorm_forward_args* args, rmsnorm_forward_args* out);
rmsnorm_status read_args(const rmsnorm_backward_args* args, rmsnorm_backward_args* out);

// The rest of the contract's checks, on read_args' copy: shape, pointers, strides, dtypes,
// scalars, every argument's bytes within int64 and the address space, and the overlap rules.
rmsnorm_status validate(const rmsnorm_forward_args& args);
rmsnorm_status validate(const rmsnorm_backward_args& args);

// read_args, then validate on the copy.
rmsnorm_status validate(const rmsnorm_forward_args* args, rmsnorm_forward_args* out);
rmsnorm_status validate(const rmsnorm_backward_args* args, rmsnorm_backward_args* out);

// The quantized forward's arguments, read and checked: `quant` as given but its forward
// pointer, which points at `forward`, the copy of *args->forward (read_args' copy: in it, y's
// dtype is the contract's when y is not written). Not copyable: the pointer points inside.
struct QuantArgs {
    rmsnorm_quant_args quant;
    rmsnorm_forward_args forward;
    int64_t groups = 1;  // scales per row (dynamic modes)

    QuantArgs() = default;
    QuantArgs(const QuantArgs&) = delete;
    QuantArgs& operator=(const QuantArgs&) = delete;
};

// read_args and validate of the quantized forward: every field of the forward as the forward
// checks it (y optional, rstd NULL), then the quantization's fields, bytes and overlaps.
rmsnorm_status validate(const rmsnorm_quant_args* args, QuantArgs* out);

// The GPU backward's workspace (its first `bytes` bytes, which the kernels write) must not
// overlap any argument of validated args.
rmsnorm_status check_workspace(const rmsnorm_backward_args& args, const void* workspace,
                               size_t bytes);

}  // namespace rmsnorm::detail
