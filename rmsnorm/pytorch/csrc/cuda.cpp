// The ops' CUDA kernels: librmsnorm's compiled kernels on the current stream, for every call
// they cover; the Python launcher (the triton_ ops) for the rest, where Python's checks name
// a bad argument. Covered: tensors of one dtype (f32, f16, bf16; the weight too), rows
// addressable with one stride, outputs that are inputs exactly or share no memory with them.
// Everything checked here is checked from metadata: a Python-level check costs more host time
// than the whole C++ call.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "compiled.hpp"
#include "rmsnorm/rmsnorm.h"
#include "rows.hpp"
#include "schemas.hpp"

namespace rmsnorm_torch {
namespace {

// A new contiguous CUDA tensor, without the dispatcher's round trip; NaN-filled as torch.empty
// is under torch.use_deterministic_algorithms with fill_uninitialized_memory (tests use it).
Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype, at::Device device) {
    Tensor t = at::detail::empty_cuda(sizes, dtype, device, std::nullopt);
    const auto& ctx = at::globalContext();
    if (C10_UNLIKELY(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory()))
        at::native::fill_empty_deterministic_(t);
    return t;
}

CUstream stream_of(const Tensor& x) {
    return reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
}

// Whether a CUDA tensor of x's dtype and device, plain, can be read by the compiled kernels.
bool operand(const Tensor& t, const Tensor& x) {
    return t.is_cuda() && plain(t) && t.scalar_type() == x.scalar_type() &&
           t.device() == x.device();
}

bool weight_ok(const OptTensor& weight, const Tensor& x) {
    return !weight || (operand(*weight, x) && weight->dim() == 1 && weight->size(0) == x.size(-1) &&
                       weight->is_contiguous());
}

// The checks every op makes of x (its rows one stride apart: before anything is allocated),
// the weight and the casting mode.
bool covered(const Tensor& x, const OptTensor& weight, Mode casting_mode) {
    return compiled_enabled() && x.is_cuda() && plain(x) && dtype_of(x) && x.dim() > 0 &&
           x.numel() > 0 && row_stride(x) && weight_ok(weight, x) && casting_mode_of(casting_mode);
}

// ... and the forward's, of the scalars too.
bool covered(const Tensor& x, const OptTensor& weight, double eps, double offset,
             Mode casting_mode) {
    return covered(x, weight, casting_mode) && scalars_valid(eps, offset, weight.has_value());
}

bool same_shape(const Tensor& t, const Tensor& x) {
    return operand(t, x) && t.sizes() == x.sizes();
}

rmsnorm_forward_args forward_args(const Tensor& x, int64_t sx, const OptTensor& weight, double eps,
                                  double offset, Mode casting_mode) {
    rmsnorm_forward_args a{};
    a.struct_size = sizeof(a);
    a.n = x.size(-1);
    a.rows = x.numel() / a.n;
    a.x = {x.data_ptr(), sx, *dtype_of(x)};
    if (weight) {
        a.weight = weight->data_ptr();
        a.weight_dtype = *dtype_of(*weight);
    }
    a.eps = static_cast<float>(eps);
    a.offset = static_cast<float>(offset);
    a.casting_mode = *casting_mode_of(casting_mode);
    // Few rows of looped width: the Python launcher's split forward is faster there.
    a.launch_flags = RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS;
    return a;
}

rmsnorm_rows rows_of(const Tensor& t, int64_t stride) {
    return {t.data_ptr(), stride, *dtype_of(t)};
}

// librmsnorm's answer: true when it launched; false for a call its kernels do not take (no
// kernel for this GPU, sizes beyond 2^31, few rows of looped width), which the Python
// launcher then computes or refuses. CUDA errors raise.
bool launched(rmsnorm_status status) {
    if (status == RMSNORM_SUCCESS) return true;
    if (status == RMSNORM_ERROR_UNSUPPORTED || status == RMSNORM_ERROR_INVALID_ARGUMENT)
        return false;
    TORCH_CHECK(false, "rmsnorm: librmsnorm: ", rmsnorm_status_string(status), ": ",
                rmsnorm_last_error());
}

// librmsnorm launches in the thread's current CUDA context. A thread PyTorch has made no runtime
// call on yet (autograd's device threads, whose first backward can find its memory in the
// allocator's cache) has none, and CUDAGuard does not make one: cudaGetDevice already answers
// x's device there. Then the device is set for real and the call made again: no cost on the
// calls that find a context.
template <class Call>
rmsnorm_status in_context(const Tensor& x, Call call) {
    rmsnorm_status status = call();
    if (status != RMSNORM_ERROR_NO_GPU) return status;
    C10_CUDA_CHECK(c10::cuda::SetDevice(x.get_device(), /*force=*/true));
    return call();
}

Tensor rstd_for(const Tensor& x, bool return_rstd) {
    if (!return_rstd) return empty({0}, at::kFloat, x.device());
    return empty(x.sizes().slice(0, x.dim() - 1), at::kFloat, x.device());
}

// Where the forward writes rstd: nowhere for an undefined or empty (unrequested) rstd.
float* rstd_data(const Tensor& rstd) {
    return rstd.defined() && rstd.numel() ? rstd.data_ptr<float>() : nullptr;
}

// The plain norm into a caller-chosen y (rstd written when it has elements). False when the
// compiled kernels do not cover the call.
bool norm_into(const Tensor& x, const OptTensor& weight, const Tensor& y, const Tensor& rstd,
               double eps, double offset, Mode casting_mode) {
    const auto sx = row_stride(x), sy = row_stride(y);
    if (!sx || !sy) return false;
    c10::cuda::CUDAGuard guard(x.device());
    rmsnorm_forward_args a = forward_args(x, *sx, weight, eps, offset, casting_mode);
    a.y = rows_of(y, *sy);
    a.rstd = rstd_data(rstd);
    return launched(in_context(x, [&] { return rmsnorm_forward(&a, stream_of(x)); }));
}

std::tuple<Tensor, Tensor> fwd_cuda(const Tensor& x, const OptTensor& weight, double eps,
                                    double offset, Mode casting_mode, bool return_rstd) {
    if (covered(x, weight, eps, offset, casting_mode)) {
        Tensor y = empty(x.sizes(), x.scalar_type(), x.device());
        Tensor rstd = rstd_for(x, return_rstd);
        if (norm_into(x, weight, y, rstd, eps, offset, casting_mode)) return {y, rstd};
    }
    return triton_ops().fwd.call(x, weight, eps, offset, casting_mode, return_rstd);
}

// The fused add into caller-chosen outputs: y, and residual_out (residual itself in place).
// False when the compiled kernels do not cover the call.
bool add_into(const Tensor& x, const Tensor& residual, const OptTensor& weight, const Tensor& y,
              const Tensor& residual_out, const Tensor& rstd, double eps, double offset,
              Mode casting_mode, Mode normalized_sum) {
    const auto sx = row_stride(x), sresidual = row_stride(residual), sy = row_stride(y),
               sresidual_out = row_stride(residual_out);
    if (!sx || !sresidual || !sy || !sresidual_out) return false;
    c10::cuda::CUDAGuard guard(x.device());
    rmsnorm_forward_args a = forward_args(x, *sx, weight, eps, offset, casting_mode);
    a.y = rows_of(y, *sy);
    a.residual = rows_of(residual, *sresidual);
    a.residual_out = rows_of(residual_out, *sresidual_out);
    a.rstd = rstd_data(rstd);
    a.normalized_sum = *normalized_sum_of(normalized_sum);
    return launched(in_context(x, [&] { return rmsnorm_fused_add_forward(&a, stream_of(x)); }));
}

// A known normalized_sum, the unrounded one only with a residual (the launcher names it
// without one). librmsnorm refuses the unrounded sum where it compiled no kernel for it: the
// launcher's then.
bool sum_covered(Mode normalized_sum, bool fused) {
    const auto sum = normalized_sum_of(normalized_sum);
    return sum && (fused || *sum == RMSNORM_SUM_ROUNDED);
}

bool add_covered(const Tensor& x, const Tensor& residual, const OptTensor& weight, double eps,
                 double offset, Mode casting_mode, Mode normalized_sum) {
    return sum_covered(normalized_sum, true) && covered(x, weight, eps, offset, casting_mode) &&
           same_shape(residual, x);
}

std::tuple<Tensor, Tensor, Tensor> add_fwd_cuda(const Tensor& x, const Tensor& residual,
                                                const OptTensor& weight, double eps, double offset,
                                                Mode casting_mode, Mode normalized_sum,
                                                bool return_rstd) {
    if (add_covered(x, residual, weight, eps, offset, casting_mode, normalized_sum)) {
        Tensor y = empty(x.sizes(), x.scalar_type(), x.device());
        Tensor residual_out = empty(x.sizes(), x.scalar_type(), x.device());
        Tensor rstd = rstd_for(x, return_rstd);
        if (add_into(x, residual, weight, y, residual_out, rstd, eps, offset, casting_mode,
                     normalized_sum))
            return {y, residual_out, rstd};
    }
    return triton_ops().add_fwd.call(x, residual, weight, eps, offset, casting_mode,
                                     normalized_sum, return_rstd);
}

// residual is written: it must be writable and share no memory with what is read.
bool updatable(const Tensor& residual, const Tensor& x, const OptTensor& weight) {
    return residual.is_non_overlapping_and_dense() && writable(residual) &&
           !ranges_meet(residual, x) && !(weight && ranges_meet(residual, *weight));
}

Tensor add_fwd_inplace_cuda(const Tensor& x, const Tensor& residual, const OptTensor& weight,
                            double eps, double offset, Mode casting_mode,
                            Mode normalized_sum) {
    if (add_covered(x, residual, weight, eps, offset, casting_mode, normalized_sum) &&
        updatable(residual, x, weight)) {
        Tensor y = empty(x.sizes(), x.scalar_type(), x.device());
        if (add_into(x, residual, weight, y, residual, Tensor(), eps, offset, casting_mode,
                     normalized_sum))
            return y;
    }
    return triton_ops().add_fwd_inplace.call(x, residual, weight, eps, offset, casting_mode,
                                             normalized_sum);
}

// out= and in place: y may be x exactly, residual_out residual exactly; otherwise each output
// shares no memory with anything else. (The Python launcher decides the rest element by
// element, or names the overlap.)
bool into_covered(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                  const Tensor& y, const OptTensor& residual_out) {
    if (!same_shape(y, x) || !writable(y) || (weight && ranges_meet(y, *weight))) return false;
    if (!same_view(y, x) && ranges_meet(y, x)) return false;
    if (!residual) return !residual_out;
    if (!residual_out || !same_shape(*residual, x) || ranges_meet(y, *residual)) return false;
    const Tensor& ro = *residual_out;
    if (!same_shape(ro, x) || ranges_meet(ro, y)) return false;
    if (same_view(ro, *residual)) return updatable(ro, x, weight);
    return writable(ro) && !ranges_meet(ro, *residual) && !ranges_meet(ro, x) &&
           !(weight && ranges_meet(ro, *weight));
}

void fwd_into_cuda(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                   const Tensor& y, const OptTensor& residual_out, double eps, double offset,
                   Mode casting_mode, Mode normalized_sum) {
    if (sum_covered(normalized_sum, residual.has_value()) &&
        covered(x, weight, eps, offset, casting_mode) &&
        into_covered(x, residual, weight, y, residual_out)) {
        const bool done = residual ? add_into(x, *residual, weight, y, *residual_out, Tensor(), eps,
                                              offset, casting_mode, normalized_sum)
                                   : norm_into(x, weight, y, Tensor(), eps, offset, casting_mode);
        if (done) return;
    }
    triton_ops().fwd_into.call(x, residual, weight, y, residual_out, eps, offset, casting_mode,
                               normalized_sum);
}

std::tuple<Tensor, Tensor> bwd_cuda(const Tensor& dy, const Tensor& x, const OptTensor& weight,
                                    const Tensor& rstd, const OptTensor& dresidual, double offset,
                                    Mode casting_mode, bool need_dw) {
    const int64_t rows = x.numel() / std::max<int64_t>(x.size(-1), 1);
    if (covered(x, weight, casting_mode) && scalars_valid(0.0, offset, weight.has_value()) &&
        same_shape(dy, x) && (!dresidual || same_shape(*dresidual, x)) && rstd.is_cuda() &&
        plain(rstd) && rstd.scalar_type() == at::kFloat && rstd.is_contiguous() &&
        rstd.numel() == rows && rstd.device() == x.device()) {
        const auto sdy = row_stride(dy), sx = row_stride(x);
        const auto sdresidual = dresidual ? row_stride(*dresidual) : std::optional<int64_t>(0);
        if (sdy && sx && sdresidual) {
            c10::cuda::CUDAGuard guard(x.device());
            Tensor dx = empty(x.sizes(), x.scalar_type(), x.device());
            const bool dw_wanted = need_dw && weight;
            Tensor dw = dw_wanted ? empty(weight->sizes(), weight->scalar_type(), x.device())
                                  : empty({0}, x.scalar_type(), x.device());
            rmsnorm_backward_args a{};
            a.struct_size = sizeof(a);
            a.n = x.size(-1);
            a.rows = rows;
            a.dy = rows_of(dy, *sdy);
            a.x = rows_of(x, *sx);
            if (dresidual) a.dresidual = rows_of(*dresidual, *sdresidual);
            a.dx = rows_of(dx, a.n);
            a.rstd = rstd.data_ptr<float>();
            if (weight) {
                a.weight = weight->data_ptr();
                a.weight_dtype = *dtype_of(*weight);
            }
            a.dw = dw_wanted ? dw.data_ptr() : nullptr;
            a.offset = static_cast<float>(offset);
            a.casting_mode = *casting_mode_of(casting_mode);
            size_t bytes = 0;
            if (launched(
                    in_context(x, [&] { return rmsnorm_backward_workspace_size(&a, &bytes); }))) {
                // The caching allocator's blocks are 512-byte aligned.
                Tensor workspace;
                if (bytes) workspace = empty({static_cast<int64_t>(bytes)}, at::kByte, x.device());
                void* space = bytes ? workspace.data_ptr() : nullptr;
                const auto status = dresidual
                                        ? rmsnorm_fused_add_backward(&a, space, bytes, stream_of(x))
                                        : rmsnorm_backward(&a, space, bytes, stream_of(x));
                if (launched(status)) return {dx, dw};
            }
        }
    }
    return triton_ops().bwd.call(dy, x, weight, rstd, dresidual, offset, casting_mode, need_dw);
}

// The quantized forward. Covered: a dtype, casting mode and scalars the forward covers, with
// the weight; a quant dtype and group size librmsnorm knows; scale and scale_ub float32
// tensors of one element on x's device. Anything else (bad arguments included, which Python
// names) and whatever librmsnorm refuses (f32, e5m2, no weight, unaligned) takes the launcher.
std::optional<rmsnorm_quant_format> format_of(at::ScalarType t) {
    switch (t) {
        case at::kFloat8_e4m3fn: return RMSNORM_QUANT_FP8_E4M3;
        case at::kFloat8_e5m2: return RMSNORM_QUANT_FP8_E5M2;
        case at::kChar: return RMSNORM_QUANT_INT8;
        default: return std::nullopt;
    }
}

bool one_float(const OptTensor& t, const Tensor& x) {
    return !t || (t->is_cuda() && plain(*t) && t->scalar_type() == at::kFloat &&
                  t->numel() == 1 && t->device() == x.device());
}

// The quantized forward's options past its tensors, gathered once at the op's entry so that
// what decides coverage, allocation and the launch is written once (the op's signature keeps
// the loose arguments: it is the dispatcher's).
struct QuantOptions {
    const OptTensor& scale;
    const OptTensor& scale_ub;
    double eps;
    double offset;
    Mode casting_mode;
    Mode normalized_sum;
    Mode quantizer;
    at::ScalarType quant_dtype;
    int64_t group_size;
    bool ue8m0;
    bool transposed_scales;
    bool return_unquantized;
};

struct QuantOutputs {
    Tensor out, scales, unquantized;
};

// The outputs as the Python launcher allocates them (rmsnorm.launch.quant): contiguous, the
// per-group scales transposed where asked (the memory of a (groups, rows) tensor).
QuantOutputs quant_outputs(const Tensor& x, const QuantOptions& q) {
    QuantOutputs o;
    o.out = empty(x.sizes(), q.quant_dtype, x.device());
    const auto lead = x.sizes().slice(0, x.dim() - 1);
    const int64_t groups = q.group_size ? x.size(-1) / q.group_size : 1;
    if (q.scale) {
        o.scales = empty({0}, at::kFloat, x.device());
    } else if (q.transposed_scales) {
        std::vector<int64_t> sizes{groups}, order;
        sizes.insert(sizes.end(), lead.begin(), lead.end());
        for (int64_t d = 1; d <= static_cast<int64_t>(lead.size()); ++d) order.push_back(d);
        order.push_back(0);
        o.scales = empty(sizes, at::kFloat, x.device()).permute(order);
    } else {
        std::vector<int64_t> sizes(lead.begin(), lead.end());
        sizes.push_back(groups);
        o.scales = empty(sizes, at::kFloat, x.device());
    }
    o.unquantized = q.return_unquantized ? empty(x.sizes(), x.scalar_type(), x.device())
                                         : empty({0}, x.scalar_type(), x.device());
    return o;
}

// librmsnorm's quantized forward into o (and residual_out when fused); false when it does not
// take the call.
bool quant_into(const Tensor& x, const OptTensor& residual, const Tensor& residual_out,
                const OptTensor& weight, const QuantOptions& q, const QuantOutputs& o) {
    const auto sx = row_stride(x);
    const auto sresidual = residual ? row_stride(*residual) : std::optional<int64_t>(0);
    const auto sresidual_out = residual ? row_stride(residual_out) : std::optional<int64_t>(0);
    if (!sx || !sresidual || !sresidual_out) return false;
    c10::cuda::CUDAGuard guard(x.device());
    rmsnorm_forward_args f = forward_args(x, *sx, weight, q.eps, q.offset, q.casting_mode);
    f.launch_flags = 0;
    if (residual) {
        f.residual = rows_of(*residual, *sresidual);
        f.residual_out = rows_of(residual_out, *sresidual_out);
        f.normalized_sum = *normalized_sum_of(q.normalized_sum);
    }
    const int64_t n = x.size(-1), rows = x.numel() / n;
    if (o.unquantized.numel()) f.y = rows_of(o.unquantized, n);
    rmsnorm_quant_args a{};
    a.struct_size = sizeof(a);
    a.forward = &f;
    a.out = o.out.data_ptr();
    a.out_stride = n;
    a.format = *format_of(o.out.scalar_type());
    a.scale_mode = q.scale ? RMSNORM_SCALE_STATIC
                           : (q.group_size ? RMSNORM_SCALE_PER_GROUP : RMSNORM_SCALE_PER_TOKEN);
    a.group_size = q.group_size;
    a.scales = q.scale ? q.scale->data_ptr<float>() : o.scales.data_ptr<float>();
    const int64_t groups = q.group_size ? n / q.group_size : 1;
    a.scale_row_stride = q.transposed_scales ? 1 : groups;
    a.scale_group_stride = q.transposed_scales ? rows : 1;
    a.scale_ub = q.scale_ub ? q.scale_ub->data_ptr<float>() : nullptr;
    a.ue8m0 = q.ue8m0 ? 1 : 0;
    a.quantizer = *quantizer_of(q.quantizer);
    return launched(in_context(x, [&] { return rmsnorm_forward_quant(&a, stream_of(x)); }));
}

bool quant_covered(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                   const QuantOptions& q) {
    // Every recipe option (librmsnorm refuses the combinations it compiled no kernel for: the
    // launcher's then).
    return sum_covered(q.normalized_sum, residual.has_value()) && quantizer_of(q.quantizer) &&
           weight && covered(x, weight, q.eps, q.offset, q.casting_mode) &&
           format_of(q.quant_dtype) &&
           (q.group_size == 0 || q.group_size == 64 || q.group_size == 128) &&
           (q.group_size == 0 || x.size(-1) % q.group_size == 0) && one_float(q.scale, x) &&
           one_float(q.scale_ub, x) && (!residual || same_shape(*residual, x));
}

// The Python launcher's quantized forwards (the triton_ ops), for what librmsnorm does not take.
std::tuple<Tensor, Tensor, Tensor, Tensor> quant_fwd_launcher(const Tensor& x,
                                                              const OptTensor& residual,
                                                              const OptTensor& weight,
                                                              const QuantOptions& q) {
    return triton_ops().quant_fwd.call(x, residual, weight, q.scale, q.scale_ub, q.eps, q.offset,
                                       q.casting_mode, q.normalized_sum, q.quantizer,
                                       q.quant_dtype, q.group_size, q.ue8m0, q.transposed_scales,
                                       q.return_unquantized);
}

std::tuple<Tensor, Tensor, Tensor> quant_add_fwd_inplace_launcher(const Tensor& x,
                                                                  const Tensor& residual,
                                                                  const OptTensor& weight,
                                                                  const QuantOptions& q) {
    return triton_ops().quant_add_fwd_inplace.call(
        x, residual, weight, q.scale, q.scale_ub, q.eps, q.offset, q.casting_mode,
        q.normalized_sum, q.quantizer, q.quant_dtype, q.group_size, q.ue8m0, q.transposed_scales,
        q.return_unquantized);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> quant_fwd_cuda(
    const Tensor& x, const OptTensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    const QuantOptions q{scale, scale_ub, eps, offset, casting_mode, normalized_sum, quantizer,
                         quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized};
    if (quant_covered(x, residual, weight, q)) {
        const QuantOutputs o = quant_outputs(x, q);
        const Tensor residual_out = residual ? empty(x.sizes(), x.scalar_type(), x.device())
                                             : empty({0}, x.scalar_type(), x.device());
        if (quant_into(x, residual, residual_out, weight, q, o))
            return {o.out, o.scales, residual_out, o.unquantized};
    }
    return quant_fwd_launcher(x, residual, weight, q);
}

std::tuple<Tensor, Tensor, Tensor> quant_add_fwd_inplace_cuda(
    const Tensor& x, const Tensor& residual, const OptTensor& weight, const OptTensor& scale,
    const OptTensor& scale_ub, double eps, double offset, Mode casting_mode,
    Mode normalized_sum, Mode quantizer, at::ScalarType quant_dtype, int64_t group_size,
    bool ue8m0, bool transposed_scales, bool return_unquantized) {
    const QuantOptions q{scale, scale_ub, eps, offset, casting_mode, normalized_sum, quantizer,
                         quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized};
    if (quant_covered(x, residual, weight, q) && updatable(residual, x, weight)) {
        const QuantOutputs o = quant_outputs(x, q);
        if (quant_into(x, residual, residual, weight, q, o))
            return {o.out, o.scales, o.unquantized};
    }
    return quant_add_fwd_inplace_launcher(x, residual, weight, q);
}

}  // namespace

bool compiled_kernels_built() { return true; }

std::string compiled_kernels_report(int64_t device) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    char buffer[128] = {};
    const rmsnorm_status status = rmsnorm_gpu_kernels(buffer, sizeof(buffer));
    if (status == RMSNORM_SUCCESS) return buffer;
    return std::string("none: ") + rmsnorm_status_string(status) + ": " + rmsnorm_last_error();
}

}  // namespace rmsnorm_torch

TORCH_LIBRARY_IMPL(rmsnorm, CUDA, m) {
    using namespace rmsnorm_torch;
    m.impl("fwd", &fwd_cuda);
    m.impl("add_fwd", &add_fwd_cuda);
    m.impl("add_fwd_inplace", &add_fwd_inplace_cuda);
    m.impl("fwd_into", &fwd_into_cuda);
    m.impl("bwd", &bwd_cuda);
    m.impl("quant_fwd", &quant_fwd_cuda);
    m.impl("quant_add_fwd_inplace", &quant_add_fwd_inplace_cuda);
}
