// The rmsnorm ops' schemas and typed handles. Two families share each schema:
// - rmsnorm::fwd, add_fwd, add_fwd_inplace, fwd_into, bwd, quant_fwd, quant_add_fwd_inplace:
//   what the public functions call.
//   Autograd and CUDA kernels are registered here in C++; CPU kernels (the Python launcher)
//   and fake kernels in Python (rmsnorm/pytorch/triton_ops.py; fake.py, from the contract's
//   dtype rules).
// - rmsnorm::triton_*: the same ops through the Python launcher (rmsnorm.launch.ops, Triton's
//   kernels or interpreter), registered from Python (rmsnorm/pytorch/triton_ops.py). The C++
//   CUDA kernels hand them what the compiled kernels do not cover.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>
#include <tuple>

namespace rmsnorm_torch {

using Tensor = at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using Mode = c10::string_view;

using FwdSig = std::tuple<Tensor, Tensor>(const Tensor& x, const OptTensor& weight, double eps,
                                          double offset, Mode casting_mode, bool return_rstd);
using AddFwdSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor& x, const Tensor& residual,
                                                     const OptTensor& weight, double eps,
                                                     double offset, Mode casting_mode,
                                                     Mode normalized_sum, bool return_rstd);
using AddFwdInplaceSig = Tensor(const Tensor& x, const Tensor& residual, const OptTensor& weight,
                                double eps, double offset, Mode casting_mode,
                                Mode normalized_sum);
using FwdIntoSig = void(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                        const Tensor& y, const OptTensor& residual_out, double eps, double offset,
                        Mode casting_mode, Mode normalized_sum);
// The quantized forward (rms_norm_quant, fused_add_rms_norm_quant): residual absent for the
// plain norm; group_size 0 for per-token scales; outputs the caller did not ask for (static
// scales, the plain norm's residual_out, the unquantized y) are empty tensors.
// normalized_sum: "rounded" or "fp32" (what a fused add normalizes); quantizer: "vllm" or
// "vllm_fused" (whose formulas; rmsnorm.launch.quant_contract.QUANTIZERS).
using QuantFwdSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor& x, const OptTensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size, bool ue8m0, bool transposed_scales,
    bool return_unquantized);
using QuantAddFwdInplaceSig = std::tuple<Tensor, Tensor, Tensor>(
    const Tensor& x, const Tensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size, bool ue8m0, bool transposed_scales,
    bool return_unquantized);
using BwdSig = std::tuple<Tensor, Tensor>(const Tensor& dy, const Tensor& x,
                                          const OptTensor& weight, const Tensor& rstd,
                                          const OptTensor& dresidual, double offset,
                                          Mode casting_mode, bool need_dw);

// One family's typed handles, looked up in the dispatcher once.
struct Family {
    c10::TypedOperatorHandle<FwdSig> fwd;
    c10::TypedOperatorHandle<AddFwdSig> add_fwd;
    c10::TypedOperatorHandle<AddFwdInplaceSig> add_fwd_inplace;
    c10::TypedOperatorHandle<FwdIntoSig> fwd_into;
    c10::TypedOperatorHandle<BwdSig> bwd;
    c10::TypedOperatorHandle<QuantFwdSig> quant_fwd;
    c10::TypedOperatorHandle<QuantAddFwdInplaceSig> quant_add_fwd_inplace;
};

// The ops the public functions call ("rmsnorm::fwd", ...).
const Family& public_ops();
// The same ops through the Python launcher ("rmsnorm::triton_fwd", ...).
const Family& triton_ops();

}  // namespace rmsnorm_torch
