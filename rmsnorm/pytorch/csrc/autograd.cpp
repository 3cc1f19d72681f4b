// The ops' autograd kernels: the formulas of DESIGN.md's "Backward", saving rstd from the
// forward. A first-order backward runs rmsnorm::bwd (the kernels); one that must itself be
// differentiable (create_graph=True with an input requiring grad) computes the same contract
// with differentiable ATen ops, so double backward is right.
//
// The backward is a Node of its own, made as PyTorch's generated code makes its ops' nodes,
// not a torch::autograd::Function: that one's bookkeeping (input and output records, the
// saved_data dictionary, output wrapping) cost 5 us per forward and 3 per backward on the
// H200's host, more than the whole kernel call.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "schemas.hpp"

namespace rmsnorm_torch {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

bool requires_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const OptTensor& t) { return t && t->requires_grad(); }

template <class... T>
bool any_requires_grad(const T&... tensors) {
    return at::GradMode::is_enabled() && (requires_grad(tensors) || ...);
}

OptTensor opt(const Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; }

// eps and offset as the contract uses them: fp32 values, also for float64 tensors.
double fp32(double v) { return static_cast<double>(static_cast<float>(v)); }

// The dtype the formulas compute in: fp32, fp64 for float64.
at::ScalarType acc_of(const Tensor& x) {
    return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// (dx, dw) in ATen ops from the norm input v (in acc_of's dtype) and the rows' 1/rms r
// (keepdim): dx in norm_dtype plus dresidual, dw in the weight's dtype; "llama" rounds xhat
// to norm_dtype for dw, straight through (the rounding's error is detached, so double
// backward sees xhat).
std::tuple<Tensor, Tensor> aten_grads(const Tensor& dy, const Tensor& v, const Tensor& r,
                                      const Tensor& weight, const Tensor& dresidual,
                                      double offset, bool llama, at::ScalarType norm_dtype,
                                      bool need_dw) {
    const auto acc = v.scalar_type();
    Tensor xhat = v * r;
    const Tensor dyf = dy.to(acc);
    const Tensor g = weight.defined() ? dyf * (weight.to(acc) + fp32(offset)) : dyf;
    Tensor dx = r * (g - xhat * (g * xhat).mean(-1, true));
    if (dresidual.defined()) dx = dx + dresidual.to(acc);
    if (!need_dw) return {dx.to(norm_dtype), Tensor()};
    if (llama) xhat = xhat + (xhat.to(norm_dtype).to(acc) - xhat).detach();
    const Tensor prod = dyf * xhat;
    std::vector<int64_t> rows(prod.dim() > 1 ? prod.dim() - 1 : 0);
    for (size_t d = 0; d < rows.size(); ++d) rows[d] = static_cast<int64_t>(d);
    const Tensor dw = rows.empty() ? prod : prod.sum(rows);
    return {dx.to(norm_dtype), dw.to(weight.scalar_type())};
}

// (dx, dw) in differentiable ops, for double backward, with rstd recomputed from x, so that
// the second-order terms in x are complete.
std::tuple<Tensor, Tensor> differentiable_grads(const Tensor& dy, const Tensor& x,
                                                const Tensor& weight, const Tensor& dresidual,
                                                double eps, double offset, bool llama,
                                                at::ScalarType norm_dtype, bool need_dw) {
    const Tensor v = x.to(acc_of(x));
    const Tensor r = at::rsqrt(v.pow(2).mean(-1, true) + fp32(eps));
    return aten_grads(dy, v, r, weight, dresidual, offset, llama, norm_dtype, need_dw);
}

// What a forward keeps for its backward.
struct Saved {
    double eps;
    double offset;
    std::string casting_mode;
    at::ScalarType y_dtype;
    // normalized_sum="fp32": the norm input saved is the unrounded sum (fp32; fp64 for
    // float64), and this is the dtype the forward rounded to, the residual's.
    std::optional<at::ScalarType> unrounded_sum_of = std::nullopt;
};

// The backward of rmsnorm::fwd (inputs x, weight) and, with x_dtype set, of the fused add
// (inputs x, residual, weight; its norm input is the sum residual_out, an output of the node).
class NormBackward final : public Node {
 public:
    NormBackward(Saved saved, std::optional<at::ScalarType> x_dtype)
        : saved_(std::move(saved)), x_dtype_(x_dtype) {}

    std::string name() const override {
        return x_dtype_ ? "rmsnorm::AddNormBackward" : "rmsnorm::NormBackward";
    }

    void save(const Tensor& norm_input, bool norm_input_is_output, const OptTensor& weight,
              const Tensor& rstd) {
        norm_input_ = SavedVariable(norm_input, norm_input_is_output);
        weight_ = SavedVariable(weight, false);
        rstd_ = SavedVariable(rstd, false);
    }

    // Gradients: y's, and for the fused add residual_out's; either may be undefined (unused).
    variable_list apply(variable_list&& grads) override {
        std::lock_guard<std::mutex> lock(mutex_);  // against release_variables
        const Tensor norm_input = norm_input_.unpack(getptr());
        const Tensor weight = weight_.unpack(), rstd = rstd_.unpack();
        Tensor dy = grads[0];
        const Tensor dresidual = x_dtype_ ? grads[1] : Tensor();
        const size_t weight_index = x_dtype_ ? 2 : 1;
        const bool need_dw = weight.defined() && task_should_compute_output(weight_index);
        if (!dy.defined()) dy = at::zeros_like(norm_input, saved_.y_dtype);
        auto [dnorm_input, dw] = grads_of(dy, norm_input, weight, rstd, dresidual, need_dw);
        if (!x_dtype_) return {dnorm_input, dw};
        // x and residual both receive the gradient of residual_out (x in its own dtype: bf16
        // activations on an fp32 residual stream).
        Tensor dx =
            dnorm_input.scalar_type() == *x_dtype_ ? dnorm_input : dnorm_input.to(*x_dtype_);
        return {dx, dnorm_input, dw};
    }

    // Compiled autograd (torch._dynamo.compiled_autograd) asks every node for its state here.
    // This one cannot give it yet: say so by name rather than with PyTorch's generic error.
    void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& /*args*/) const override {
        TORCH_CHECK_NOT_IMPLEMENTED(
            false, "rmsnorm: compiled autograd does not support ", name(),
            " yet (not done); torch.compile the forward instead (AOTAutograd compiles its "
            "backward), or run the backward without compiled autograd");
    }

    void release_variables() override {
        std::lock_guard<std::mutex> lock(mutex_);
        norm_input_.reset_data();
        weight_.reset_data();
        rstd_.reset_data();
    }

 private:
    std::tuple<Tensor, Tensor> grads_of(const Tensor& dy, const Tensor& norm_input,
                                        const Tensor& weight, const Tensor& rstd,
                                        const Tensor& dresidual, bool need_dw) const {
        const bool llama = saved_.casting_mode == "llama";
        const at::ScalarType norm_dtype =
            saved_.unrounded_sum_of.value_or(norm_input.scalar_type());
        if (any_requires_grad(dy, dresidual, norm_input, weight))
            return differentiable_grads(dy, norm_input, weight, dresidual, saved_.eps,
                                        saved_.offset, llama, norm_dtype, need_dw);
        if (saved_.unrounded_sum_of) {
            // The backward kernels take the norm input in the gradient's dtype and round
            // xhat to it; the unrounded sum is fp32 while the forward rounded to the
            // residual's dtype, so its gradients are DESIGN.md's formulas in ATen ops, from
            // the saved rstd.
            return aten_grads(dy, norm_input, rstd.unsqueeze(-1).to(norm_input.scalar_type()),
                              weight, dresidual, saved_.offset, llama, norm_dtype, need_dw);
        }
        // Below autograd: nothing here requires grad, and bwd's Autograd kernel is a boxed
        // fallback that would cost a few microseconds for nothing.
        at::AutoDispatchBelowADInplaceOrView below;
        auto [dnorm_input, dw] =
            public_ops().bwd.call(dy, norm_input, opt(weight), rstd, opt(dresidual), saved_.offset,
                                  saved_.casting_mode, need_dw);
        return {dnorm_input, need_dw ? dw : Tensor()};
    }

    Saved saved_;
    std::optional<at::ScalarType> x_dtype_;
    SavedVariable norm_input_, weight_, rstd_;
};

// The node's owner type: std::shared_ptr<Node> up to PyTorch 2.11, c10::intrusive_ptr<Node>
// after it. Both branches depend on N, so only the one this PyTorch has is compiled.
using NodePtr = std::decay_t<decltype(std::declval<const Tensor&>().grad_fn())>;
template <class P>
struct is_shared_ptr : std::false_type {};
template <class P>
struct is_shared_ptr<std::shared_ptr<P>> : std::true_type {};

template <class N, class... Args>
auto make_node(Args&&... args) {
    if constexpr (is_shared_ptr<NodePtr>::value) {
        // deleteNode (found by argument-dependent lookup) frees long chains of nodes without
        // recursing once per node.
        return std::shared_ptr<N>(new N(std::forward<Args>(args)...),
                                  [](N* node) { deleteNode(node); });
    } else {
        return c10::make_intrusive<N>(std::forward<Args>(args)...);
    }
}

Saved saved(double eps, double offset, Mode casting_mode, const Tensor& y) {
    return {eps, offset, std::string(casting_mode), y.scalar_type()};
}

std::tuple<Tensor, Tensor> fwd_autograd(const Tensor& x, const OptTensor& weight, double eps,
                                        double offset, Mode casting_mode, bool return_rstd) {
    const bool differentiable = any_requires_grad(x, weight);
    Tensor y, rstd;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(y, rstd) = public_ops().fwd.call(x, weight, eps, offset, casting_mode,
                                                  return_rstd || differentiable);
    }
    if (differentiable) {
        auto node = make_node<NormBackward>(saved(eps, offset, casting_mode, y), std::nullopt);
        node->set_next_edges(torch::autograd::collect_next_edges(x, weight));
        torch::autograd::set_history(y, node);
        node->save(x, false, weight, rstd);
    }
    return {y, rstd};
}

std::tuple<Tensor, Tensor, Tensor> add_fwd_autograd(const Tensor& x, const Tensor& residual,
                                                    const OptTensor& weight, double eps,
                                                    double offset, Mode casting_mode,
                                                    Mode normalized_sum, bool return_rstd) {
    const bool differentiable = any_requires_grad(x, residual, weight);
    const bool unrounded = normalized_sum == "fp32";
    // The norm input of an unrounded sum is no output: the backward keeps it, formed by ATen
    // ops under autograd (so that double backward reaches x and residual through it) before
    // an in-place caller overwrites the residual. It costs an fp32 tensor of x's shape.
    Tensor unrounded_sum;
    if (differentiable && unrounded) {
        const auto acc = acc_of(residual);
        unrounded_sum = residual.to(acc) + x.to(acc);
    }
    Tensor y, residual_out, rstd;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        std::tie(y, residual_out, rstd) =
            public_ops().add_fwd.call(x, residual, weight, eps, offset, casting_mode,
                                      normalized_sum, return_rstd || differentiable);
    }
    if (differentiable) {
        Saved kept = saved(eps, offset, casting_mode, y);
        if (unrounded) kept.unrounded_sum_of = residual.scalar_type();
        auto node = make_node<NormBackward>(std::move(kept), x.scalar_type());
        node->set_next_edges(torch::autograd::collect_next_edges(x, residual, weight));
        torch::autograd::set_history(y, node);
        torch::autograd::set_history(residual_out, node);
        // After its history is set: saved as an output, the node holds no reference to itself.
        if (unrounded) {
            node->save(unrounded_sum, false, weight, rstd);
        } else {
            node->save(residual_out, true, weight, rstd);
        }
    }
    return {y, residual_out, rstd};
}

// In place under autograd: the out-of-place fused add, then the sum copied into residual,
// which autograd records (it must see residual's update).
Tensor add_fwd_inplace_autograd(const Tensor& x, const Tensor& residual, const OptTensor& weight,
                                double eps, double offset, Mode casting_mode,
                                Mode normalized_sum) {
    if (!any_requires_grad(x, residual, weight)) {
        at::AutoDispatchBelowADInplaceOrView below;
        Tensor y = public_ops().add_fwd_inplace.call(x, residual, weight, eps, offset,
                                                     casting_mode, normalized_sum);
        torch::autograd::impl::bump_version(residual);
        return y;
    }
    auto [y, residual_out, rstd] =
        add_fwd_autograd(x, residual, weight, eps, offset, casting_mode, normalized_sum, false);
    const_cast<Tensor&>(residual).copy_(residual_out);
    return y;
}

void fwd_into_autograd(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                       const Tensor& y, const OptTensor& residual_out, double eps, double offset,
                       Mode casting_mode, Mode normalized_sum) {
    TORCH_CHECK(!any_requires_grad(x, residual, weight),
                "out= is not differentiable: an input requires grad; call without out (or "
                "under torch.no_grad())");
    {
        at::AutoDispatchBelowADInplaceOrView below;
        public_ops().fwd_into.call(x, residual, weight, y, residual_out, eps, offset, casting_mode,
                                   normalized_sum);
    }
    torch::autograd::impl::bump_version(y);
    if (residual_out) torch::autograd::impl::bump_version(*residual_out);
}

// The quantized forward has no gradient (its outputs are fp8/int8 values and their scales):
// an input that requires grad is refused rather than silently cut from the graph.
void no_grad_for_quant(const Tensor& x, const OptTensor& residual, const OptTensor& weight) {
    TORCH_CHECK(!any_requires_grad(x, residual, weight),
                "rms_norm_quant and fused_add_rms_norm_quant are not differentiable: an input "
                "requires grad; call them under torch.no_grad() or torch.inference_mode() (for "
                "training use rms_norm)");
}

std::tuple<Tensor, Tensor, Tensor, Tensor> quant_fwd_autograd(
    const Tensor& x, const OptTensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    no_grad_for_quant(x, residual, weight);
    at::AutoDispatchBelowADInplaceOrView below;
    return public_ops().quant_fwd.call(x, residual, weight, scale, scale_ub, eps, offset,
                                       casting_mode, normalized_sum, quantizer, quant_dtype,
                                       group_size, ue8m0, transposed_scales, return_unquantized);
}

std::tuple<Tensor, Tensor, Tensor> quant_add_fwd_inplace_autograd(
    const Tensor& x, const Tensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    no_grad_for_quant(x, residual, weight);
    std::tuple<Tensor, Tensor, Tensor> outputs;
    {
        at::AutoDispatchBelowADInplaceOrView below;
        outputs = public_ops().quant_add_fwd_inplace.call(
            x, residual, weight, scale, scale_ub, eps, offset, casting_mode, normalized_sum,
            quantizer, quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized);
    }
    torch::autograd::impl::bump_version(residual);
    return outputs;
}

}  // namespace
}  // namespace rmsnorm_torch

TORCH_LIBRARY_IMPL(rmsnorm, Autograd, m) {
    using namespace rmsnorm_torch;
    m.impl("fwd", &fwd_autograd);
    m.impl("add_fwd", &add_fwd_autograd);
    m.impl("add_fwd_inplace", &add_fwd_inplace_autograd);
    m.impl("fwd_into", &fwd_into_autograd);
    // Not differentiable itself (double backward takes the ATen formula instead).
    m.impl("bwd", torch::autograd::autogradNotImplementedFallback());
    m.impl("quant_fwd", &quant_fwd_autograd);
    m.impl("quant_add_fwd_inplace", &quant_add_fwd_inplace_autograd);
}
