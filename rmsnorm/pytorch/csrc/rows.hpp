// What the compiled kernels can take of a tensor, decided from its metadata alone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_torch {

// librmsnorm's dtype for t's, or nullopt for float64 and the rest.
std::optional<rmsnorm_dtype> dtype_of(const at::Tensor& t);

// The row stride of t seen as [rows, n], or nullopt when its rows need more than one stride
// (or its last dimension is strided).
std::optional<int64_t> row_stride(const at::Tensor& t);

// What the kernels can read as raw memory: not a tensor subclass (DTensor, FakeTensor, ...,
// whose data_ptr is not the data), dense (not sparse or nested), no negative bit.
bool plain(const at::Tensor& t);

// Whether the bytes a and b span meet (their elements may still be disjoint, interleaved).
bool ranges_meet(const at::Tensor& a, const at::Tensor& b);

// Whether a and b are the same elements: one data pointer, shape, strides and dtype.
bool same_view(const at::Tensor& a, const at::Tensor& b);

// An output the kernels may write: each element its own memory, rows one stride apart.
bool writable(const at::Tensor& t);

// The scalars' values as the Python launcher accepts them (else it names the argument).
bool scalars_valid(double eps, double offset, bool has_weight);

// The casting mode, or nullopt when it is neither "llama" nor "gemma".
std::optional<rmsnorm_casting_mode> casting_mode_of(c10::string_view casting_mode);
// The recipe options' C enums ("rounded", "fp32"; "vllm", "vllm_fused"); nullopt for any other
// string.
std::optional<rmsnorm_normalized_sum> normalized_sum_of(c10::string_view normalized_sum);
std::optional<rmsnorm_quantizer> quantizer_of(c10::string_view quantizer);

}  // namespace rmsnorm_torch
