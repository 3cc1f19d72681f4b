// The ops' autograd kernels: the formulas of DESIGN.md's "Backward", saving rstd from the
// forward. A first-order backward runs rmsnorm::bwd (the kernels); one that must itself be
// differentiable (create_graph=True with an input requiring grad) computes the same contract
// with differentiable ATen ops, so double backward is right.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

#include "schemas.hpp"

namespace rmsnorm_torch {
namespace {

using torch::autograd::AutogradContext;
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

// (dx, dw) in differentiable ops, for double backward. As the kernels: fp32 math (fp64 for
// float64), dx in x's dtype plus dresidual, dw in the weight's dtype. Unlike them rstd is
// recomputed from x, so that the second-order terms in x are complete; "llama" rounds xhat to
// x's dtype for dw, straight through (the rounding's error is detached).
std::tuple<Tensor, Tensor> differentiable_grads(const Tensor& dy, const Tensor& x,
                                                const Tensor& weight, const Tensor& dresidual,
                                                double eps, double offset, bool llama,
                                                bool need_dw) {
    const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const Tensor v = x.to(acc);
    const Tensor r = at::rsqrt(v.pow(2).mean(-1, true) + fp32(eps));
    Tensor xhat = v * r;
    const Tensor dyf = dy.to(acc);
    const Tensor g = weight.defined() ? dyf * (weight.to(acc) + fp32(offset)) : dyf;
    Tensor dx = r * (g - xhat * (g * xhat).mean(-1, true));
    if (dresidual.defined()) dx = dx + dresidual.to(acc);
    if (!need_dw) return {dx.to(x.scalar_type()), Tensor()};
    if (llama) xhat = xhat + (xhat.to(x.scalar_type()).to(acc) - xhat).detach();
    const Tensor prod = dyf * xhat;
    std::vector<int64_t> rows(prod.dim() > 1 ? prod.dim() - 1 : 0);
    for (size_t d = 0; d < rows.size(); ++d) rows[d] = static_cast<int64_t>(d);
    const Tensor dw = rows.empty() ? prod : prod.sum(rows);
    return {dx.to(x.scalar_type()), dw.to(weight.scalar_type())};
}

void save(AutogradContext* ctx, const Tensor& norm_input, const OptTensor& weight,
          const Tensor& rstd, double eps, double offset, Mode casting_mode, const Tensor& y,
          int64_t weight_index) {
    ctx->save_for_backward({norm_input, weight.value_or(Tensor()), rstd});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["casting_mode"] = std::string(casting_mode);
    ctx->saved_data["y_dtype"] = y.scalar_type();
    ctx->saved_data["weight_index"] = weight_index;
    ctx->mark_non_differentiable({rstd});
    // rstd never has a gradient, and an unused y or residual_out is handled in grads(): no
    // zeros allocated and filled for them on every backward.
    ctx->set_materialize_grads(false);
}

// (the gradient of the norm's input, dw) for the saved forward.
std::tuple<Tensor, Tensor> grads(AutogradContext* ctx, Tensor dy, const Tensor& dresidual) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &norm_input = saved[0], &weight = saved[1], &rstd = saved[2];
    const double offset = ctx->saved_data["offset"].toDouble();
    const std::string casting_mode = ctx->saved_data["casting_mode"].toStringRef();
    const bool need_dw =
        weight.defined() && ctx->needs_input_grad(ctx->saved_data["weight_index"].toInt());
    if (!dy.defined()) dy = at::zeros_like(norm_input, ctx->saved_data["y_dtype"].toScalarType());
    if (any_requires_grad(dy, dresidual, norm_input, weight))
        return differentiable_grads(dy, norm_input, weight, dresidual,
                                    ctx->saved_data["eps"].toDouble(), offset,
                                    casting_mode == "llama", need_dw);
    // Below autograd: nothing here requires grad, and bwd's Autograd kernel is a boxed
    // fallback that would cost a few microseconds for nothing.
    at::AutoDispatchBelowADInplaceOrView below;
    auto [dnorm_input, dw] = public_ops().bwd.call(dy, norm_input, opt(weight), rstd,
                                                   opt(dresidual), offset, casting_mode, need_dw);
    return {dnorm_input, need_dw ? dw : Tensor()};
}

class Norm : public torch::autograd::Function<Norm> {
 public:
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const OptTensor& weight,
                                 double eps, double offset, Mode casting_mode) {
        at::AutoDispatchBelowADInplaceOrView below;
        auto [y, rstd] = public_ops().fwd.call(x, weight, eps, offset, casting_mode, true);
        save(ctx, x, weight, rstd, eps, offset, casting_mode, y, 1);
        return {y, rstd};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        auto [dx, dw] = grads(ctx, grad_outputs[0], Tensor());
        return {dx, dw, Tensor(), Tensor(), Tensor()};
    }
};

// The fused add: x and residual both receive the gradient of residual_out (x in its own
// dtype: bf16 activations on an fp32 residual stream).
class AddNorm : public torch::autograd::Function<AddNorm> {
 public:
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual,
                                 const OptTensor& weight, double eps, double offset,
                                 Mode casting_mode) {
        at::AutoDispatchBelowADInplaceOrView below;
        auto [y, residual_out, rstd] =
            public_ops().add_fwd.call(x, residual, weight, eps, offset, casting_mode, true);
        save(ctx, residual_out, weight, rstd, eps, offset, casting_mode, y, 2);
        ctx->saved_data["x_dtype"] = x.scalar_type();
        return {y, residual_out, rstd};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        auto [dnorm_input, dw] = grads(ctx, grad_outputs[0], grad_outputs[1]);
        const auto x_dtype = ctx->saved_data["x_dtype"].toScalarType();
        Tensor dx = dnorm_input.scalar_type() == x_dtype ? dnorm_input : dnorm_input.to(x_dtype);
        return {dx, dnorm_input, dw, Tensor(), Tensor(), Tensor()};
    }
};

std::tuple<Tensor, Tensor> fwd_autograd(const Tensor& x, const OptTensor& weight, double eps,
                                        double offset, Mode casting_mode, bool return_rstd) {
    if (!any_requires_grad(x, weight)) {
        at::AutoDispatchBelowADInplaceOrView below;
        return public_ops().fwd.call(x, weight, eps, offset, casting_mode, return_rstd);
    }
    const variable_list out = Norm::apply(x, weight, eps, offset, casting_mode);
    return {out[0], out[1]};
}

std::tuple<Tensor, Tensor, Tensor> add_fwd_autograd(const Tensor& x, const Tensor& residual,
                                                    const OptTensor& weight, double eps,
                                                    double offset, Mode casting_mode,
                                                    bool return_rstd) {
    if (!any_requires_grad(x, residual, weight)) {
        at::AutoDispatchBelowADInplaceOrView below;
        return public_ops().add_fwd.call(x, residual, weight, eps, offset, casting_mode,
                                         return_rstd);
    }
    const variable_list out = AddNorm::apply(x, residual, weight, eps, offset, casting_mode);
    return {out[0], out[1], out[2]};
}

// In place under autograd: the out-of-place fused add, then the sum copied into residual,
// which autograd records (it must see residual's update).
Tensor add_fwd_inplace_autograd(const Tensor& x, const Tensor& residual, const OptTensor& weight,
                                double eps, double offset, Mode casting_mode) {
    if (!any_requires_grad(x, residual, weight)) {
        at::AutoDispatchBelowADInplaceOrView below;
        Tensor y =
            public_ops().add_fwd_inplace.call(x, residual, weight, eps, offset, casting_mode);
        torch::autograd::impl::bump_version(residual);
        return y;
    }
    const variable_list out = AddNorm::apply(x, residual, weight, eps, offset, casting_mode);
    const_cast<Tensor&>(residual).copy_(out[1]);
    return out[0];
}

void fwd_into_autograd(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                       const Tensor& y, const OptTensor& residual_out, double eps, double offset,
                       Mode casting_mode) {
    TORCH_CHECK(!any_requires_grad(x, residual, weight),
                "out= is not differentiable: an input requires grad; call without out (or "
                "under torch.no_grad())");
    {
        at::AutoDispatchBelowADInplaceOrView below;
        public_ops().fwd_into.call(x, residual, weight, y, residual_out, eps, offset, casting_mode);
    }
    torch::autograd::impl::bump_version(y);
    if (residual_out) torch::autograd::impl::bump_version(*residual_out);
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
}
