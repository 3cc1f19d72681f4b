// PyTorch's way into librmsnorm: the inference forward and fused add as plain C++ functions
// (pybind11), so that a call costs a C launch instead of a Python one. Each returns None when
// the tensors are outside what librmsnorm's kernels take (the caller then uses the Python
// launcher): CUDA tensors of one dtype (f32, f16, bf16), the weight of that dtype, rows
// addressable with one stride, no input requiring grad (autograd's route is the Python one).
// Bad arguments raise, with librmsnorm's message. Every check the caller would otherwise make
// in Python is made here: a Python-level check costs more host time than the whole C++ call.
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "rmsnorm/rmsnorm.h"

namespace {

std::optional<rmsnorm_dtype> dtype_of(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kFloat:
            return RMSNORM_F32;
        case at::kHalf:
            return RMSNORM_F16;
        case at::kBFloat16:
            return RMSNORM_BF16;
        default:
            return std::nullopt;
    }
}

// The row stride of t seen as [rows, n], or nullopt when its rows need more than one stride
// (or its last dimension is strided).
std::optional<int64_t> row_stride(const at::Tensor& t) {
    const int64_t d = t.dim();
    if (d == 0 || (t.size(d - 1) != 1 && t.stride(d - 1) != 1)) return std::nullopt;
    std::optional<int64_t> stride, expected;
    for (int64_t i = d - 2; i >= 0; --i) {
        if (t.size(i) == 1) continue;  // its stride is never used
        if (!stride) {
            stride = expected = t.stride(i);
        } else if (t.stride(i) != *expected) {
            return std::nullopt;
        }
        *expected *= t.size(i);
    }
    return stride.value_or(0);
}

// What the kernels can read as raw memory: not a tensor subclass (DTensor, FakeTensor, ...,
// whose data_ptr is not the data), a dense tensor (not sparse or nested), and no negative bit
// (`x._neg_view()` stores -x). The Python routes handle (or refuse, naming them) the others.
bool plain(const at::Tensor& t) {
    return !t.key_set().has(c10::DispatchKey::Python) && t.layout() == at::kStrided &&
           !t.is_nested() && !t.is_neg();
}

// Whether the bytes a and b span meet (their elements may still be disjoint, interleaved).
bool ranges_meet(const at::Tensor& a, const at::Tensor& b) {
    const auto span = [](const at::Tensor& t) {
        int64_t last = 0;
        for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
        const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
        return std::pair<uintptr_t, uintptr_t>{
            start, start + static_cast<uintptr_t>((last + 1) * t.element_size())};
    };
    if (a.numel() == 0 || b.numel() == 0) return false;
    const auto [a0, a1] = span(a);
    const auto [b0, b1] = span(b);
    return a0 < b1 && b0 < a1;
}

bool eligible(const at::Tensor& x, const std::optional<at::Tensor>& weight) {
    if (!x.is_cuda() || !plain(x) || !dtype_of(x) || x.dim() == 0 || x.size(-1) == 0) return false;
    if (at::GradMode::is_enabled() && (x.requires_grad() || (weight && weight->requires_grad())))
        return false;
    if (weight) {
        const at::Tensor& w = *weight;
        if (!w.is_cuda() || !plain(w) || w.scalar_type() != x.scalar_type() || w.dim() != 1 ||
            w.size(0) != x.size(-1) || !w.is_contiguous() || w.device() != x.device())
            return false;
    }
    return true;
}

void check(rmsnorm_status status) {
    if (status == RMSNORM_SUCCESS) return;
    const std::string message = rmsnorm_last_error();
    if (status == RMSNORM_ERROR_INVALID_ARGUMENT) throw py::value_error(message);
    throw std::runtime_error(std::string(rmsnorm_status_string(status)) + ": " + message);
}

bool llama_of(const std::string& casting_mode) {
    if (casting_mode == "llama") return true;
    if (casting_mode == "gemma") return false;
    throw py::value_error("casting_mode must be 'llama' or 'gemma', got '" + casting_mode + "'");
}

rmsnorm_forward_args args_of(const at::Tensor& x, int64_t sx, const std::optional<at::Tensor>& w,
                             double eps, double offset, bool llama) {
    rmsnorm_forward_args a{};
    a.struct_size = sizeof(a);
    a.n = x.size(-1);
    a.rows = a.n == 0 ? 0 : x.numel() / a.n;
    a.x = {x.data_ptr(), sx, *dtype_of(x)};
    if (w) {
        a.weight = w->data_ptr();
        a.weight_dtype = *dtype_of(*w);
    }
    a.eps = static_cast<float>(eps);
    a.offset = static_cast<float>(offset);
    a.casting_mode = llama ? RMSNORM_LLAMA : RMSNORM_GEMMA;
    return a;
}

// A new tensor like x, contiguous: the allocation without the dispatcher's round trip.
at::Tensor empty_like_rows(const at::Tensor& x) {
    return at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), std::nullopt);
}

CUstream stream_of(const at::Tensor& x) {
    return reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
}

py::object forward(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                   double offset, const std::string& casting_mode) {
    const bool llama = llama_of(casting_mode);
    if (!eligible(x, weight)) return py::none();
    const auto sx = row_stride(x);
    if (!sx) return py::none();
    c10::cuda::CUDAGuard guard(x.device());  // librmsnorm launches in the current context
    at::Tensor y = empty_like_rows(x);
    rmsnorm_forward_args a = args_of(x, *sx, weight, eps, offset, llama);
    a.y = {y.data_ptr(), a.n, a.x.dtype};
    check(rmsnorm_forward(&a, stream_of(x)));
    return py::cast(y);
}

py::object fused_add_forward(const at::Tensor& x, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, double eps, double offset,
                             const std::string& casting_mode, bool inplace) {
    const bool llama = llama_of(casting_mode);
    // plain() first: a nested residual has no sizes() to compare.
    if (!eligible(x, weight) || !plain(residual) || residual.scalar_type() != x.scalar_type() ||
        residual.sizes() != x.sizes() || residual.device() != x.device() ||
        (at::GradMode::is_enabled() && residual.requires_grad()))
        return py::none();
    const auto sx = row_stride(x), sresidual = row_stride(residual);
    if (!sx || !sresidual) return py::none();
    if (inplace && (!residual.is_non_overlapping_and_dense() || ranges_meet(residual, x) ||
                    (weight && ranges_meet(residual, *weight))))
        return py::none();  // the Python path decides these element by element, or explains
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = empty_like_rows(x);
    at::Tensor residual_out = inplace ? residual : empty_like_rows(x);
    rmsnorm_forward_args a = args_of(x, *sx, weight, eps, offset, llama);
    a.y = {y.data_ptr(), a.n, a.x.dtype};
    a.residual = {residual.data_ptr(), *sresidual, a.x.dtype};
    a.residual_out = inplace ? a.residual : rmsnorm_rows{residual_out.data_ptr(), a.n, a.x.dtype};
    check(rmsnorm_fused_add_forward(&a, stream_of(x)));
    return py::make_tuple(y, residual_out);
}

}  // namespace

// eps and offset are taken as Python floats only (noconvert): pybind11 would otherwise turn a
// bool, a tensor or anything with __float__ into a double, which the Python routes refuse as
// a TypeError naming the argument (the caller falls back to them on TypeError).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, py::arg("x"), py::arg("weight"), py::arg("eps").noconvert(),
          py::arg("offset").noconvert(), py::arg("casting_mode"));
    m.def("fused_add_forward", &fused_add_forward, py::arg("x"), py::arg("residual"),
          py::arg("weight"), py::arg("eps").noconvert(), py::arg("offset").noconvert(),
          py::arg("casting_mode"), py::arg("inplace"));
}
