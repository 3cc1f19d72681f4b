// Argument checks shared by every entry point: a status and a message naming the argument.
#pragma once

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm::detail {

// The dtype of y the contract gives: llama promotes the norm input's dtype with the weight's
// (as PyTorch's promote_types), gemma keeps the norm input's.
rmsnorm_dtype output_dtype(rmsnorm_dtype norm_dtype, const void* weight, rmsnorm_dtype weight_dtype,
                           rmsnorm_casting_mode mode);

rmsnorm_status validate(const rmsnorm_forward_args* args);
rmsnorm_status validate(const rmsnorm_backward_args* args);

}  // namespace rmsnorm::detail
