// The rmsnorm op library: the schemas of both families (schemas.hpp), the CPU kernels, and
// the switch and report of which kernels serve CUDA tensors.
#include <torch/library.h>

#include <optional>
#include <string>

#include "compiled.hpp"
#include "schemas.hpp"

namespace rmsnorm_torch {
namespace {

// Each schema once, without its name: the public op and its triton_ twin share it.
constexpr const char* kFwd =
    "(Tensor x, Tensor? weight, float eps, float offset, str casting_mode, bool return_rstd) "
    "-> (Tensor y, Tensor rstd)";
constexpr const char* kAddFwd =
    "(Tensor x, Tensor residual, Tensor? weight, float eps, float offset, str casting_mode, "
    "str normalized_sum, bool return_rstd) -> (Tensor y, Tensor residual_out, Tensor rstd)";
constexpr const char* kAddFwdInplace =
    "(Tensor x, Tensor(a!) residual, Tensor? weight, float eps, float offset, "
    "str casting_mode, str normalized_sum) -> Tensor y";
constexpr const char* kFwdInto =
    "(Tensor x, Tensor? residual, Tensor? weight, Tensor(a!) y, Tensor(b!)? residual_out, "
    "float eps, float offset, str casting_mode, str normalized_sum) -> ()";
constexpr const char* kBwd =
    "(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, Tensor? dresidual, float offset, "
    "str casting_mode, bool need_dw) -> (Tensor dx, Tensor dw)";

constexpr const char* kQuantFwd =
    "(Tensor x, Tensor? residual, Tensor? weight, Tensor? scale, Tensor? scale_ub, float eps, "
    "float offset, str casting_mode, str normalized_sum, str quantizer, ScalarType quant_dtype, "
    "int group_size, bool ue8m0, bool transposed_scales, bool return_unquantized) "
    "-> (Tensor out, Tensor scales, Tensor residual_out, Tensor unquantized)";
constexpr const char* kQuantAddFwdInplace =
    "(Tensor x, Tensor(a!) residual, Tensor? weight, Tensor? scale, Tensor? scale_ub, "
    "float eps, float offset, str casting_mode, str normalized_sum, str quantizer, "
    "ScalarType quant_dtype, int group_size, bool ue8m0, bool transposed_scales, "
    "bool return_unquantized) "
    "-> (Tensor out, Tensor scales, Tensor unquantized)";

template <class Sig>
c10::TypedOperatorHandle<Sig> find(const std::string& name) {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow(("rmsnorm::" + name).c_str(), "")
        .typed<Sig>();
}

Family family(const std::string& prefix) {
    return {find<FwdSig>(prefix + "fwd"), find<AddFwdSig>(prefix + "add_fwd"),
            find<AddFwdInplaceSig>(prefix + "add_fwd_inplace"),
            find<FwdIntoSig>(prefix + "fwd_into"), find<BwdSig>(prefix + "bwd"),
            find<QuantFwdSig>(prefix + "quant_fwd"),
            find<QuantAddFwdInplaceSig>(prefix + "quant_add_fwd_inplace")};
}

// CPU tensors: the Python launcher (Triton's interpreter, or the contract's PyTorch recipe).
std::tuple<Tensor, Tensor> fwd_cpu(const Tensor& x, const OptTensor& weight, double eps,
                                   double offset, Mode casting_mode, bool return_rstd) {
    return triton_ops().fwd.call(x, weight, eps, offset, casting_mode, return_rstd);
}

std::tuple<Tensor, Tensor, Tensor> add_fwd_cpu(const Tensor& x, const Tensor& residual,
                                               const OptTensor& weight, double eps, double offset,
                                               Mode casting_mode, Mode normalized_sum,
                                               bool return_rstd) {
    return triton_ops().add_fwd.call(x, residual, weight, eps, offset, casting_mode,
                                     normalized_sum, return_rstd);
}

Tensor add_fwd_inplace_cpu(const Tensor& x, const Tensor& residual, const OptTensor& weight,
                           double eps, double offset, Mode casting_mode,
                           Mode normalized_sum) {
    return triton_ops().add_fwd_inplace.call(x, residual, weight, eps, offset, casting_mode,
                                             normalized_sum);
}

void fwd_into_cpu(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                  const Tensor& y, const OptTensor& residual_out, double eps, double offset,
                  Mode casting_mode, Mode normalized_sum) {
    triton_ops().fwd_into.call(x, residual, weight, y, residual_out, eps, offset, casting_mode,
                               normalized_sum);
}

std::tuple<Tensor, Tensor> bwd_cpu(const Tensor& dy, const Tensor& x, const OptTensor& weight,
                                   const Tensor& rstd, const OptTensor& dresidual, double offset,
                                   Mode casting_mode, bool need_dw) {
    return triton_ops().bwd.call(dy, x, weight, rstd, dresidual, offset, casting_mode, need_dw);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> quant_fwd_cpu(
    const Tensor& x, const OptTensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    return triton_ops().quant_fwd.call(x, residual, weight, scale, scale_ub, eps, offset,
                                       casting_mode, normalized_sum, quantizer, quant_dtype,
                                       group_size, ue8m0, transposed_scales, return_unquantized);
}

std::tuple<Tensor, Tensor, Tensor> quant_add_fwd_inplace_cpu(
    const Tensor& x, const Tensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    return triton_ops().quant_add_fwd_inplace.call(
        x, residual, weight, scale, scale_ub, eps, offset, casting_mode, normalized_sum,
        quantizer, quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized);
}

bool use_compiled_kernels(std::optional<bool> enabled) {
    return enabled ? set_compiled_enabled(*enabled) : compiled_enabled();
}

}  // namespace

const Family& public_ops() {
    static const Family ops = family("");
    return ops;
}

const Family& triton_ops() {
    static const Family ops = family("triton_");
    return ops;
}

}  // namespace rmsnorm_torch

TORCH_LIBRARY(rmsnorm, m) {
    using namespace rmsnorm_torch;
    const auto define = [&m](const std::string& name, const char* schema) {
        m.def(torch::schema((name + schema).c_str(), c10::AliasAnalysisKind::FROM_SCHEMA));
    };
    for (const std::string prefix : {"", "triton_"}) {
        define(prefix + "fwd", kFwd);
        define(prefix + "add_fwd", kAddFwd);
        define(prefix + "add_fwd_inplace", kAddFwdInplace);
        define(prefix + "fwd_into", kFwdInto);
        define(prefix + "bwd", kBwd);
        define(prefix + "quant_fwd", kQuantFwd);
        define(prefix + "quant_add_fwd_inplace", kQuantAddFwdInplace);
    }
    // Whether CUDA tensors take the compiled kernels where they cover the call (the default),
    // or the Python launcher for everything; returns the previous setting (None: only reads it).
    m.def("use_compiled_kernels(bool? enabled) -> bool", &use_compiled_kernels);
    // What serves CUDA tensors on device `device`: "sm_90 cubins", or why nothing compiled does.
    m.def("compiled_kernels(int device) -> str", &compiled_kernels_report);
    // Whether this library has the compiled kernels at all (use_compiled_kernels only switches).
    m.def("compiled_kernels_built() -> bool", &compiled_kernels_built);
}

TORCH_LIBRARY_IMPL(rmsnorm, CPU, m) {
    using namespace rmsnorm_torch;
    m.impl("fwd", &fwd_cpu);
    m.impl("add_fwd", &add_fwd_cpu);
    m.impl("add_fwd_inplace", &add_fwd_inplace_cpu);
    m.impl("fwd_into", &fwd_into_cpu);
    m.impl("bwd", &bwd_cpu);
    m.impl("quant_fwd", &quant_fwd_cpu);
    m.impl("quant_add_fwd_inplace", &quant_add_fwd_inplace_cpu);
}

// The kernels read raw memory and the Python launcher handles the negative and conjugate
// bits itself (inputs resolved, such outputs refused by name): PyTorch's fallback for them,
// which copies such tensors around the call, is skipped.
namespace {
void fall_through(torch::Library& m) {
    for (const std::string prefix : {"", "triton_"})
        for (const char* name : {"fwd", "add_fwd", "add_fwd_inplace", "fwd_into", "bwd",
                                 "quant_fwd", "quant_add_fwd_inplace"})
            m.impl((prefix + name).c_str(), torch::CppFunction::makeFallthrough());
}
}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm, Negative, m) { fall_through(m); }
TORCH_LIBRARY_IMPL(rmsnorm, Conjugate, m) { fall_through(m); }
