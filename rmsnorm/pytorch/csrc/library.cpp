// The rmsnorm op library: the schemas of both families (schemas.hpp), and the switch and
// report of which kernels serve CUDA tensors. CPU tensors have no C++ kernel: the Python
// launcher's functions are registered as the ops' CPU kernels (rmsnorm/pytorch/triton_ops.py).
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

// The op table: each op's name and schema, which define, the fall-through registrations and
// the families' handles (family() below, by these names) all read.
struct OpDef {
    const char* name;
    const char* schema;
};
constexpr OpDef kOps[] = {
    {"fwd", kFwd},
    {"add_fwd", kAddFwd},
    {"add_fwd_inplace", kAddFwdInplace},
    {"fwd_into", kFwdInto},
    {"bwd", kBwd},
    {"quant_fwd", kQuantFwd},
    {"quant_add_fwd_inplace", kQuantAddFwdInplace},
};
constexpr const char* kFamilies[] = {"", "triton_"};

template <class Sig>
c10::TypedOperatorHandle<Sig> find(const std::string& name) {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow(("rmsnorm::" + name).c_str(), "")
        .typed<Sig>();
}

// Family's members in kOps' order: typed<Sig> throws at load if an entry's schema is not the
// member's signature.
Family family(const std::string& prefix) {
    const auto name = [&prefix](int i) { return prefix + kOps[i].name; };
    return {find<FwdSig>(name(0)),
            find<AddFwdSig>(name(1)),
            find<AddFwdInplaceSig>(name(2)),
            find<FwdIntoSig>(name(3)),
            find<BwdSig>(name(4)),
            find<QuantFwdSig>(name(5)),
            find<QuantAddFwdInplaceSig>(name(6))};
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
    for (const std::string prefix : kFamilies)
        for (const OpDef& op : kOps) define(prefix + op.name, op.schema);
    // Whether CUDA tensors take the compiled kernels where they cover the call (the default),
    // or the Python launcher for everything; returns the previous setting (None: only reads it).
    m.def("use_compiled_kernels(bool? enabled) -> bool", &use_compiled_kernels);
    // What serves CUDA tensors on device `device`: "sm_90 cubins", or why nothing compiled does.
    m.def("compiled_kernels(int device) -> str", &compiled_kernels_report);
    // Whether this library has the compiled kernels at all (use_compiled_kernels only switches).
    m.def("compiled_kernels_built() -> bool", &compiled_kernels_built);
}

// The kernels read raw memory and the Python launcher handles the negative and conjugate
// bits itself (inputs resolved, such outputs refused by name): PyTorch's fallback for them,
// which copies such tensors around the call, is skipped.
namespace {
void fall_through(torch::Library& m) {
    for (const std::string prefix : rmsnorm_torch::kFamilies)
        for (const rmsnorm_torch::OpDef& op : rmsnorm_torch::kOps)
            m.impl((prefix + op.name).c_str(), torch::CppFunction::makeFallthrough());
}
}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm, Negative, m) { fall_through(m); }
TORCH_LIBRARY_IMPL(rmsnorm, Conjugate, m) { fall_through(m); }
