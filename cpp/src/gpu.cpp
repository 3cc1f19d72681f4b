// The GPU entry points: validation, choice of the compiled kernel (the launch table's rules,
// as the Python launcher applies them) and its launch.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#include "driver.hpp"
#include "errors.hpp"
#include "kernel_params.hpp"
#include "kernels.hpp"
#include "launch_plan.hpp"
#include "rmsnorm/rmsnorm.h"
#include "validate.hpp"

namespace rmsnorm::detail {
namespace {

rmsnorm_status unsupported(const std::string& message) {
    return fail(RMSNORM_ERROR_UNSUPPORTED, "rmsnorm: " + message);
}

// The kernel of op for rows of n elements: the launch table's row for n, as
// rmsnorm.launch.configs.rule_index picks it; where the two casting modes compute the same, the
// llama kernel serves both (the build compiles no other).
KernelKey key_of(const ImageSet& set, Op op, rmsnorm_dtype dtype, const void* weight,
                 rmsnorm_casting_mode mode, int64_t n) {
    KernelKey key{op, static_cast<uint32_t>(dtype)};
    key.has_w = weight != nullptr;
    key.llama = !key.has_w || !abi::kBothCastingModes[key.dtype] || mode == RMSNORM_LLAMA;
    key.variant = set.rules->row_for(op, key.dtype, n);
    return key;
}

uint32_t log2_of(uint32_t pow2) {
    uint32_t k = 0;
    while ((1u << (k + 1)) <= pow2) ++k;
    return k;
}

rmsnorm_status check_flags(unsigned flags) {
    if ((flags & ~unsigned{RMSNORM_LAUNCH_PDL | RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS}) != 0)
        return invalid("launch_flags has unknown bits");
    return succeed();
}

// Row counts and strides reach the kernels as 32-bit integers, as Triton's JIT passes any
// below 2^31 (the kernels form offsets in 64 bits): the same code as the Python path's.
// Forward calls of more rows are split into launches of kRowsPerLaunch rows, a multiple of
// 16 that keeps every launch's pointers as aligned as the first's.
constexpr int64_t kRowsPerLaunch = int64_t{1} << 30;

rmsnorm_status check_strides(int64_t rows,
                             std::initializer_list<std::pair<const char*, int64_t>> strides) {
    if (rows <= 1) return succeed();  // a single row's stride is never used
    for (const auto& [name, stride] : strides) {
        if (stride > INT32_MAX) {
            return unsupported(std::string(name) + ".stride is " + std::to_string(stride) +
                               "; the GPU kernels take row strides below 2^31 elements");
        }
    }
    return succeed();
}

// A weight in another dtype than x's would first fail validate's output-dtype rule (llama
// promotes y), naming y; name the weight, the real cause.
rmsnorm_status check_weight_dtype(const void* weight, rmsnorm_dtype weight_dtype,
                                  rmsnorm_dtype x_dtype) {
    if (weight != nullptr && weight_dtype != x_dtype) {
        return unsupported(
            "weight_dtype differs from x's; the GPU kernels of librmsnorm take the weight in "
            "the activations' dtype (the Python package mixes them)");
    }
    return RMSNORM_SUCCESS;
}

// The dtype rules of the built kernels (rmsnorm/aot/build.py): one activation dtype, the weight's
// the same. Names the first argument that differs.
rmsnorm_status check_dtypes(rmsnorm_dtype act, const void* weight, rmsnorm_dtype weight_dtype,
                            std::initializer_list<std::pair<const char*, rmsnorm_dtype>> others,
                            rmsnorm_accumulation accumulation, int64_t n) {
    for (const auto& [name, dtype] : others) {
        if (dtype != act) {
            return unsupported(std::string(name) +
                               ".dtype differs from x's; the GPU kernels of librmsnorm take one "
                               "dtype for all activations (the Python package mixes them)");
        }
    }
    if (rmsnorm_status s = check_weight_dtype(weight, weight_dtype, act); s != RMSNORM_SUCCESS)
        return s;
    if (accumulation != RMSNORM_ACCUMULATE_F32) {
        return invalid(
            "accumulation: the GPU sums in fp32 (RMSNORM_ACCUMULATE_F64 is the CPU "
            "reference's)");
    }
    if (n > INT32_MAX) {
        return unsupported("n is " + std::to_string(n) + "; the GPU kernels take n < 2^31");
    }
    return succeed();
}

CUdeviceptr ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

struct Context {
    const Driver* driver;
    const DeviceInfo* device;
};

rmsnorm_status open(Context& c) {
    rmsnorm_status s = RMSNORM_SUCCESS;
    c.driver = driver(&s);
    if (c.driver == nullptr) return s;
    return current_device(*c.driver, &c.device);
}

// The vendor recipes' options are compiled where their presets take them, not for every
// kernel (rmsnorm/aot/build.py, RECIPE_*): a key asking for one that has no image names the
// option instead of failing as a missing kernel.
rmsnorm_status check_recipe_compiled(const Context& c, const KernelKey& key) {
    if ((!key.fp32_sum && !key.vllm_fused) || find_image(*c.device, key) != nullptr)
        return succeed();
    return unsupported(
        std::string(key.vllm_fused ? "quantizer RMSNORM_QUANTIZER_VLLM_FUSED" : "normalized_sum "
                                                                               "RMSNORM_SUM_FP32") +
        " is compiled for the presets that take it: f16 and bf16 rows with a weight of their "
        "dtype, 16-byte aligned with n and the row strides multiples of 16, and for the fused "
        "quantizer RMSNORM_LLAMA (docs/USAGE.md, \"Recipes\"); this call is not one of them (the "
        "Python package computes it)");
}

// The grid of image's launch over `rows` rows (launch_plan.hpp).
int64_t programs_for(const KernelImage& image, int64_t rows, int sm_count) {
    return grid_of(rows, image.rows, image.programs_per_sm, sm_count);
}

template <typename Params>
rmsnorm_status launch(const Context& c, const Kernel& k, int64_t grid, Params& p, CUstream stream,
                      unsigned flags) {
    void** params = p.slots();
    if (params == nullptr) {
        return fail(RMSNORM_ERROR_NOT_IMPLEMENTED,
                    std::string("rmsnorm: internal error: kernel parameter ") + p.missing() +
                        " left unset or set as another kind (src/gpu.cpp against "
                        "generated/kernel_abi.hpp)");
    }
    if (grid > INT32_MAX) return invalid("too many programs");
    const auto f = reinterpret_cast<CUfunction>(k.handle);
    const auto blocks = static_cast<unsigned>(grid), threads = 32u * k.image->num_warps,
               shared = static_cast<unsigned>(k.image->shared);
    if ((flags & RMSNORM_LAUNCH_PDL) == 0 || !c.device->set->waits_on_prior_grid) {
        const CUresult r =
            c.driver->LaunchKernel(f, blocks, 1, 1, threads, 1, 1, shared, stream, params, nullptr);
        return r == CUDA_SUCCESS ? succeed() : cuda_failure(*c.driver, r, "cuLaunchKernel");
    }
    CUlaunchAttribute pdl{};
    pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = blocks;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = threads;
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = shared;
    config.hStream = stream;
    config.attrs = &pdl;
    config.numAttrs = 1;
    const CUresult r = c.driver->LaunchKernelEx(&config, f, params, nullptr);
    return r == CUDA_SUCCESS ? succeed() : cuda_failure(*c.driver, r, "cuLaunchKernelEx");
}

size_t element_bytes(rmsnorm_dtype dtype) { return dtype == RMSNORM_F32 ? 4 : 2; }

// The stride a kernel gets for rows of args (launch_plan.hpp).
template <typename Args>
int64_t row_stride(int64_t stride, const Args& args) {
    return kernel_row_stride(stride, args.rows, args.n);
}

// The arguments the plain and the quantized forward kernels share beyond their pointers: the
// row strides (one per tensor here: the inner strides of two-level row addressing are 0), n,
// eps and offset. A is the kernel family's argument enum (generated/kernel_abi.hpp), whose
// shared slots carry the same names.
template <typename A, typename Params>
void set_forward_scalars(Params& p, const rmsnorm_forward_args& a, int64_t sx, int64_t sresidual,
                         int64_t sy, int64_t sresidual_out) {
    for (const auto& [outer, inner, stride] :
         {std::tuple{A::kSxO, A::kSxI, sx}, std::tuple{A::kSresidualO, A::kSresidualI, sresidual},
          std::tuple{A::kSyO, A::kSyI, sy},
          std::tuple{A::kSresidualOutO, A::kSresidualOutI, sresidual_out}}) {
        p.int32(outer, static_cast<int32_t>(stride));
        p.int32(inner, 0);
    }
    p.int32(A::kN, static_cast<int32_t>(a.n));
    p.float32(A::kEps, a.eps);
    p.float32(A::kOffset, a.offset);
}

rmsnorm_status forward(const rmsnorm_forward_args* args, CUstream stream, bool fused) {
    rmsnorm_forward_args a;
    rmsnorm_status s = read_args(args, &a);
    if (s != RMSNORM_SUCCESS) return s;
    if ((s = check_weight_dtype(a.weight, a.weight_dtype, a.x.dtype)) != RMSNORM_SUCCESS) return s;
    if ((s = validate(a)) != RMSNORM_SUCCESS) return s;
    if (fused != (a.residual.data != nullptr)) {
        return invalid(fused ? "residual.data is NULL; rmsnorm_fused_add_forward adds it"
                             : "residual.data is set; use rmsnorm_fused_add_forward");
    }
    if ((s = check_flags(a.launch_flags)) != RMSNORM_SUCCESS) return s;
    const rmsnorm_dtype act = a.x.dtype;
    if ((s = check_dtypes(act, a.weight, a.weight_dtype,
                          {{"y", a.y.dtype},
                           {"residual", fused ? a.residual.dtype : act},
                           {"residual_out", fused ? a.residual_out.dtype : act}},
                          a.accumulation, a.n)) != RMSNORM_SUCCESS)
        return s;
    if ((s = check_strides(a.rows, {{"x", a.x.stride},
                                    {"y", a.y.stride},
                                    {"residual", fused ? a.residual.stride : 0},
                                    {"residual_out", fused ? a.residual_out.stride : 0}})) !=
        RMSNORM_SUCCESS)
        return s;
    Context c{};
    if ((s = open(c)) != RMSNORM_SUCCESS) return s;
    if (a.rows == 0) return succeed();

    // Arguments the kernel does not use get pointers it may never write through: as the
    // Python launcher passes them.
    const void* x = a.x.data;
    const void* residual = fused ? a.residual.data : x;
    const void* y = a.y.data;
    const void* residual_out = fused ? a.residual_out.data : y;
    const int64_t sx = row_stride(a.x.stride, a), sy = row_stride(a.y.stride, a),
                  sresidual = fused ? row_stride(a.residual.stride, a) : 0,
                  sresidual_out = fused ? row_stride(a.residual_out.stride, a) : 0;
    const size_t eb = element_bytes(a.x.dtype);
    using A = abi::ForwardArg;
    ForwardParams p;
    set_forward_scalars<A>(p, a, sx, sresidual, sy, sresidual_out);
    p.pointer(A::kW, ptr(a.weight != nullptr ? a.weight : x));
    // The rows of a launch, seen as rows 0..count-1 of tensors starting at row `first`.
    const auto place = [&](int64_t first, int64_t count) {
        const auto at = [first, eb](const void* q, int64_t stride) {
            return ptr(q) + static_cast<CUdeviceptr>(first * stride) * eb;
        };
        p.pointer(A::kX, at(x, sx));
        p.pointer(A::kResidual, at(residual, sresidual));
        p.pointer(A::kY, at(y, sy));
        p.pointer(A::kResidualOut, at(residual_out, sresidual_out));
        p.pointer(A::kRstd, a.rstd != nullptr ? ptr(a.rstd + first) : ptr(x));
        const auto m = static_cast<int32_t>(count);
        p.int32(A::kM, m);
        p.int32(A::kH, m);
        p.int32(A::kRstdRows, a.rstd != nullptr ? m : 0);
    };
    place(0, std::min(kRowsPerLaunch, a.rows));

    KernelKey key =
        key_of(*c.device->set, fused ? Op::kAdd : Op::kForward, act, a.weight, a.casting_mode, a.n);
    // Every launch's pointers are as aligned as the first's (kRowsPerLaunch).
    key.align = p.alignment();
    // An f32 sum rounded to f32 is the unrounded one: the rounded sum's kernel computes it.
    key.fp32_sum = a.normalized_sum == RMSNORM_SUM_FP32 && act != RMSNORM_F32;
    if ((s = check_recipe_compiled(c, key)) != RMSNORM_SUCCESS) return s;
    Kernel k{};
    if ((s = find_kernel(*c.driver, *c.device, key, &k)) != RMSNORM_SUCCESS) return s;
    if ((a.launch_flags & RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS) != 0 && k.image->looped &&
        a.rows < c.device->sm_count / abi::kSplitForwardSmDivisor[fused ? 1 : 0]) {
        return unsupported(std::to_string(a.rows) + " looped rows are fewer than the split " +
                           "forward's threshold, which RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS refuses " +
                           "(librmsnorm has no split forward)");
    }
    for (int64_t first = 0; first < a.rows; first += kRowsPerLaunch) {
        const int64_t count = std::min(kRowsPerLaunch, a.rows - first);
        place(first, count);
        if ((s = launch(c, k, programs_for(*k.image, count, c.device->sm_count), p, stream,
                        a.launch_flags)) != RMSNORM_SUCCESS)
            return s;
    }
    return succeed();
}

const char* format_name(rmsnorm_quant_format format) {
    switch (format) {
        case RMSNORM_QUANT_FP8_E4M3:
            return "RMSNORM_QUANT_FP8_E4M3";
        case RMSNORM_QUANT_INT8:
            return "RMSNORM_QUANT_INT8";
        case RMSNORM_QUANT_FP8_E5M2:
            return "RMSNORM_QUANT_FP8_E5M2";
    }
    return "an unknown format";
}

// What the quantized kernels of this build cover beyond the forward's own rules
// (rmsnorm/aot/build.py, QUANT_*; the generated kQuant* flags): UNSUPPORTED naming the first
// thing that is not compiled.
rmsnorm_status check_quant_compiled(const QuantArgs& qa) {
    const rmsnorm_quant_args& q = qa.quant;
    const rmsnorm_forward_args& a = qa.forward;
    const bool fused = a.residual.data != nullptr;
    if (!abi::kQuantDtypes[a.x.dtype]) {
        return unsupported(
            "x.dtype is RMSNORM_F32; the quantized kernels of librmsnorm are compiled for f16 "
            "and bf16 (the Python package quantizes f32 rows)");
    }
    if (a.weight == nullptr) {
        return unsupported(
            "weight is NULL; the quantized kernels of librmsnorm are compiled with a weight "
            "(the Python package quantizes without one)");
    }
    if (!abi::kQuantFormats[q.format]) {
        return unsupported(std::string("format is ") + format_name(q.format) +
                           "; the quantized kernels of librmsnorm are compiled for "
                           "RMSNORM_QUANT_FP8_E4M3 and RMSNORM_QUANT_INT8 (the Python package "
                           "quantizes to the others)");
    }
    // The weight and the residual before y: without y, y's dtype is the contract's, which a
    // weight or residual of another dtype makes f32, and the message would name y.
    rmsnorm_status s = check_weight_dtype(a.weight, a.weight_dtype, a.x.dtype);
    if (s != RMSNORM_SUCCESS) return s;
    if ((s = check_dtypes(a.x.dtype, a.weight, a.weight_dtype,
                          {{"residual", fused ? a.residual.dtype : a.x.dtype},
                           {"residual_out", fused ? a.residual_out.dtype : a.x.dtype},
                           {"y", a.y.dtype}},
                          a.accumulation, a.n)) != RMSNORM_SUCCESS ||
        (s = check_strides(a.rows, {{"x", a.x.stride},
                                    {"residual", fused ? a.residual.stride : 0},
                                    {"residual_out", fused ? a.residual_out.stride : 0}})) !=
            RMSNORM_SUCCESS)
        return s;
    if (a.rows > 1 && q.out_stride > INT32_MAX) {
        return unsupported("out_stride is " + std::to_string(q.out_stride) +
                           "; the GPU kernels take row strides below 2^31 elements");
    }
    // A row's scale offset is formed in 64 bits, a group's (group * scale_group_stride) in 32.
    const bool dynamic = q.scale_mode != RMSNORM_SCALE_STATIC;
    if (dynamic && a.rows > 1 && q.scale_row_stride > INT32_MAX) {
        return unsupported("scale_row_stride is " + std::to_string(q.scale_row_stride) +
                           "; the GPU kernels take scale strides below 2^31 elements");
    }
    if (q.scale_mode == RMSNORM_SCALE_PER_GROUP && qa.groups > 1 &&
        q.scale_group_stride > INT32_MAX / (qa.groups - 1)) {
        return unsupported("scale_group_stride is " + std::to_string(q.scale_group_stride) +
                           ": the last group's offset, (groups - 1) * scale_group_stride, is "
                           "2^31 elements or more, which the GPU kernels do not take");
    }
    return succeed();
}

// The quantized forward: the forward's launch (the same table row, grid and row splitting)
// of the QuantForward kernel of the mode, format and group.
rmsnorm_status forward_quant(const rmsnorm_quant_args* args, CUstream stream) {
    QuantArgs qa;
    rmsnorm_status s = validate(args, &qa);
    if (s != RMSNORM_SUCCESS) return s;
    const rmsnorm_quant_args& q = qa.quant;
    const rmsnorm_forward_args& a = qa.forward;
    if ((s = check_flags(a.launch_flags)) != RMSNORM_SUCCESS) return s;
    if ((s = check_quant_compiled(qa)) != RMSNORM_SUCCESS) return s;
    const bool fused = a.residual.data != nullptr;
    const bool dynamic = q.scale_mode != RMSNORM_SCALE_STATIC;

    // Unused pointers get values the kernel never writes through, as the Python launcher
    // passes them: the residual's x, residual_out's and rstd's out, scale_ub's scales, and
    // without y (store_unq 0) out again.
    const void* x = a.x.data;
    const void* residual = fused ? a.residual.data : x;
    const void* residual_out = fused ? a.residual_out.data : q.out;
    const void* unq = a.y.data != nullptr ? a.y.data : q.out;
    const int64_t sx = row_stride(a.x.stride, a), sy = row_stride(q.out_stride, a),
                  sresidual = fused ? row_stride(a.residual.stride, a) : 0,
                  sresidual_out = fused ? row_stride(a.residual_out.stride, a) : 0;
    const int64_t ss_row = dynamic ? q.scale_row_stride : 0,
                  ss_col = q.scale_mode == RMSNORM_SCALE_PER_GROUP ? q.scale_group_stride : 0;
    const size_t eb = element_bytes(a.x.dtype);
    using A = abi::QuantForwardArg;
    QuantForwardParams p;
    set_forward_scalars<A>(p, a, sx, sresidual, sy, sresidual_out);
    p.pointer(A::kW, ptr(a.weight));
    p.int32(A::kSsRow, static_cast<int32_t>(ss_row));
    p.int32(A::kSsCol, static_cast<int32_t>(ss_col));
    p.int32(A::kStoreUnq, a.y.data != nullptr ? 1 : 0);
    p.int32(A::kHasUb, q.scale_ub != nullptr ? 1 : 0);
    p.int32(A::kUe8m0, q.ue8m0);
    p.pointer(A::kScaleUb, ptr(q.scale_ub != nullptr ? q.scale_ub : q.scales));
    const auto place = [&](int64_t first, int64_t count) {
        const auto at = [first](const void* base, int64_t stride, size_t bytes) {
            return ptr(base) + static_cast<CUdeviceptr>(first * stride) * bytes;
        };
        p.pointer(A::kX, at(x, sx, eb));
        p.pointer(A::kResidual, at(residual, sresidual, eb));
        p.pointer(A::kY, at(q.out, sy, 1));
        p.pointer(A::kUnq, at(unq, sy, eb));
        p.pointer(A::kResidualOut,
                  fused ? at(residual_out, sresidual_out, eb) : at(residual_out, sy, 1));
        p.pointer(A::kRstd, at(q.out, sy, 1));
        p.pointer(A::kScale, dynamic ? at(q.scales, ss_row, sizeof(float)) : ptr(q.scales));
        const auto m = static_cast<int32_t>(count);
        p.int32(A::kM, m);
        p.int32(A::kH, m);
        p.int32(A::kRstdRows, 0);
    };
    place(0, std::min(kRowsPerLaunch, a.rows));
    // Later launches start kRowsPerLaunch rows on (a multiple of 16): as aligned as the first.
    if (p.alignment() != abi::kQuantAlign) {
        return unsupported(
            std::string("the quantized kernels of librmsnorm are compiled for 16-byte aligned "
                        "pointers (x, residual, residual_out, weight, y, out, scales, scale_ub) "
                        "with n and row strides multiples of 16; kernel argument ") +
            p.unaligned() + " is not (the Python package takes any layout)");
    }
    Context c{};
    if ((s = open(c)) != RMSNORM_SUCCESS) return s;
    if (a.rows == 0) return succeed();

    KernelKey key = key_of(*c.device->set, fused ? Op::kAdd : Op::kForward, a.x.dtype, a.weight,
                           a.casting_mode, a.n);
    key.align = abi::kQuantAlign;
    key.quant = abi::kQuantNone + 1 + static_cast<uint32_t>(q.scale_mode);
    key.qformat = static_cast<uint32_t>(q.format);
    for (uint32_t g = 0; g < abi::kGroupSizeCount; ++g) {
        if (abi::kGroupSizes[g] == (q.scale_mode == RMSNORM_SCALE_PER_GROUP ? q.group_size : 0))
            key.group = g;
    }
    if (q.scale_mode == RMSNORM_SCALE_PER_GROUP && find_image(*c.device, key) == nullptr) {
        return unsupported("no per-group kernel of group_size " + std::to_string(q.group_size) +
                           " for n = " + std::to_string(a.n) +
                           ": the launch table's tile for this width is not a multiple of the "
                           "group (the Python package refuses it too)");
    }
    // The quantizers compute static scales alike.
    key.vllm_fused = q.quantizer == RMSNORM_QUANTIZER_VLLM_FUSED && dynamic;
    key.fp32_sum = fused && a.normalized_sum == RMSNORM_SUM_FP32;
    if ((s = check_recipe_compiled(c, key)) != RMSNORM_SUCCESS) return s;
    Kernel k{};
    if ((s = find_kernel(*c.driver, *c.device, key, &k)) != RMSNORM_SUCCESS) return s;
    for (int64_t first = 0; first < a.rows; first += kRowsPerLaunch) {
        const int64_t count = std::min(kRowsPerLaunch, a.rows - first);
        place(first, count);
        if ((s = launch(c, k, programs_for(*k.image, count, c.device->sm_count), p, stream,
                        a.launch_flags)) != RMSNORM_SUCCESS)
            return s;
    }
    return succeed();
}

// The backward kernel's arguments: unused ones get pointers it never writes through, as the
// Python launcher passes them; partials is the dw workspace (rstd without dw).
void backward_params(const rmsnorm_backward_args& a, bool fused, const void* partials,
                     BackwardParams& p) {
    using A = abi::BackwardArg;
    p.pointer(A::kDy, ptr(a.dy.data));
    p.pointer(A::kX, ptr(a.x.data));
    p.pointer(A::kW, ptr(a.weight != nullptr ? a.weight : a.x.data));
    p.pointer(A::kRstd, ptr(a.rstd));
    p.pointer(A::kDx, ptr(a.dx.data));
    p.pointer(A::kDresidual, ptr(fused ? a.dresidual.data : a.dx.data));
    p.pointer(A::kDwp, ptr(partials));
    // 32-bit, as the forward's (checked by backward_plan); one row stride per tensor.
    const auto m = static_cast<int32_t>(a.rows);
    p.int32(A::kM, m);
    p.int32(A::kH, m);
    p.int32(A::kN, static_cast<int32_t>(a.n));
    for (const auto& [outer, inner, stride] :
         {std::tuple{A::kSdyO, A::kSdyI, row_stride(a.dy.stride, a)},
          std::tuple{A::kSxO, A::kSxI, row_stride(a.x.stride, a)},
          std::tuple{A::kSdxO, A::kSdxI, row_stride(a.dx.stride, a)},
          std::tuple{A::kSdresidualO, A::kSdresidualI,
                     fused ? row_stride(a.dresidual.stride, a) : int64_t{0}}}) {
        p.int32(outer, static_cast<int32_t>(stride));
        p.int32(inner, 0);
    }
    p.float32(A::kOffset, a.offset);
}

// The backward's kernel for validated args on the current device, and its arguments in p
// (shared by the workspace query and the launch, so that both see the same grid).
rmsnorm_status backward_plan(const rmsnorm_backward_args& a, bool fused, const void* workspace,
                             Context& c, KernelKey& key, BackwardParams& p,
                             const KernelImage** image) {
    rmsnorm_status s = RMSNORM_SUCCESS;
    if (fused != (a.dresidual.data != nullptr)) {
        return invalid(fused ? "dresidual.data is NULL; rmsnorm_fused_add_backward adds it"
                             : "dresidual.data is set; use rmsnorm_fused_add_backward");
    }
    if ((s = check_flags(a.launch_flags)) != RMSNORM_SUCCESS) return s;
    const rmsnorm_dtype act = a.x.dtype;
    if ((s = check_dtypes(act, a.weight, a.weight_dtype,
                          {{"dy", a.dy.dtype}, {"dresidual", fused ? a.dresidual.dtype : act}},
                          a.accumulation, a.n)) != RMSNORM_SUCCESS)
        return s;
    if ((s = check_strides(a.rows, {{"dy", a.dy.stride},
                                    {"x", a.x.stride},
                                    {"dx", a.dx.stride},
                                    {"dresidual", fused ? a.dresidual.stride : 0}})) !=
        RMSNORM_SUCCESS)
        return s;
    if (a.rows > INT32_MAX) {
        // One launch, one set of dw partials: the rows are not split as the forward's are.
        return unsupported("rows is " + std::to_string(a.rows) +
                           "; the GPU backward takes fewer than 2^31 rows per call");
    }
    if ((s = open(c)) != RMSNORM_SUCCESS) return s;
    key = key_of(*c.device->set, Op::kBackward, act, a.weight, a.casting_mode, a.n);
    key.has_dresidual = fused;
    key.has_dw = a.dw != nullptr;
    backward_params(a, fused, key.has_dw ? workspace : a.rstd, p);
    key.align = p.alignment();
    *image = find_image(*c.device, key);
    return *image != nullptr ? succeed() : RMSNORM_ERROR_UNSUPPORTED;
}

size_t workspace_bytes_of(const rmsnorm_backward_args& a, const KernelImage& image,
                          const DeviceInfo& dev) {
    if (a.dw == nullptr || a.rows == 0) return 0;
    return static_cast<size_t>(programs_for(image, a.rows, dev.sm_count)) *
           static_cast<size_t>(a.n) * sizeof(float);
}

rmsnorm_status backward(const rmsnorm_backward_args* args, void* workspace, size_t workspace_bytes,
                        CUstream stream, bool fused) {
    rmsnorm_backward_args a;
    rmsnorm_status s = validate(args, &a);
    if (s != RMSNORM_SUCCESS) return s;
    Context c{};
    KernelKey key{};
    BackwardParams p;
    const KernelImage* image = nullptr;
    if ((s = backward_plan(a, fused, workspace, c, key, p, &image)) != RMSNORM_SUCCESS) return s;
    if (a.rows == 0) {
        // No rows: dw is a sum over nothing.
        if (a.dw == nullptr) return succeed();
        const size_t weight_bytes =
            static_cast<size_t>(a.n) * (a.weight_dtype == RMSNORM_F32 ? 4 : 2);
        const CUresult r = c.driver->MemsetD8Async(ptr(a.dw), 0, weight_bytes, stream);
        return r == CUDA_SUCCESS ? succeed() : cuda_failure(*c.driver, r, "cuMemsetD8Async");
    }
    const size_t need = workspace_bytes_of(a, *image, *c.device);
    if (need > 0 && (workspace == nullptr || workspace_bytes < need)) {
        return invalid("workspace is " + std::to_string(workspace_bytes) + " bytes" +
                       (workspace == nullptr ? " (NULL)" : "") + "; these args need " +
                       std::to_string(need) + " (rmsnorm_backward_workspace_size)");
    }
    if ((s = check_workspace(a, workspace, need)) != RMSNORM_SUCCESS) return s;
    Kernel k{};
    if ((s = find_kernel(*c.driver, *c.device, key, &k)) != RMSNORM_SUCCESS) return s;
    const int64_t grid = programs_for(*k.image, a.rows, c.device->sm_count);
    if ((s = launch(c, k, grid, p, stream, a.launch_flags)) != RMSNORM_SUCCESS || !key.has_dw)
        return s;

    // dw: the fixed-order sum of the grid's partial rows.
    KernelKey rkey{Op::kReduce, static_cast<uint32_t>(a.weight_dtype)};
    rkey.variant = log2_of(static_cast<uint32_t>(reduce_block(a.n)));
    using R = abi::ReduceArg;
    ReduceParams rp;
    rp.pointer(R::kDwp, ptr(workspace));
    rp.pointer(R::kDw, ptr(a.dw));
    rp.int32(R::kP, static_cast<int32_t>(grid));
    rp.int32(R::kN, static_cast<int32_t>(a.n));
    rkey.align = rp.alignment();
    Kernel rk{};
    if ((s = find_kernel(*c.driver, *c.device, rkey, &rk)) != RMSNORM_SUCCESS) return s;
    return launch(c, rk, reduce_grid(a.n), rp, stream, a.launch_flags);
}

}  // namespace
}  // namespace rmsnorm::detail

using rmsnorm::detail::backward;
using rmsnorm::detail::forward;
using rmsnorm::detail::forward_quant;

extern "C" {

rmsnorm_status rmsnorm_forward(const rmsnorm_forward_args* args, CUstream stream) {
    return forward(args, stream, false);
}

rmsnorm_status rmsnorm_fused_add_forward(const rmsnorm_forward_args* args, CUstream stream) {
    return forward(args, stream, true);
}

rmsnorm_status rmsnorm_forward_quant(const rmsnorm_quant_args* args, CUstream stream) {
    return forward_quant(args, stream);
}

rmsnorm_status rmsnorm_backward_workspace_size(const rmsnorm_backward_args* args, size_t* bytes) {
    using namespace rmsnorm::detail;
    if (bytes == nullptr) return invalid("bytes is NULL");
    rmsnorm_backward_args a;
    rmsnorm_status s = validate(args, &a);
    if (s != RMSNORM_SUCCESS) return s;
    Context c{};
    KernelKey key{};
    BackwardParams p;
    const KernelImage* image = nullptr;
    // The workspace's alignment does not change the grid: plan as if it were aligned.
    static const float kAligned[4] __attribute__((aligned(16))) = {};
    if ((s = backward_plan(a, a.dresidual.data != nullptr, kAligned, c, key, p, &image)) !=
        RMSNORM_SUCCESS)
        return s;
    *bytes = workspace_bytes_of(a, *image, *c.device);
    return succeed();
}

rmsnorm_status rmsnorm_backward(const rmsnorm_backward_args* args, void* workspace,
                                size_t workspace_bytes, CUstream stream) {
    return backward(args, workspace, workspace_bytes, stream, false);
}

rmsnorm_status rmsnorm_fused_add_backward(const rmsnorm_backward_args* args, void* workspace,
                                          size_t workspace_bytes, CUstream stream) {
    return backward(args, workspace, workspace_bytes, stream, true);
}

rmsnorm_status rmsnorm_gpu_kernels(char* buffer, size_t size) {
    using namespace rmsnorm::detail;
    if (buffer == nullptr || size == 0) return invalid("buffer is NULL or size is 0");
    Context c{};
    const rmsnorm_status s = open(c);
    if (s != RMSNORM_SUCCESS) return s;
    const ImageSet& set = *c.device->set;
    const std::string text =
        "sm_" + std::to_string(set.arch) +
        (set.is_ptx ? " PTX, JIT-compiled for sm_" + std::to_string(c.device->arch)
                    : std::string(" cubins"));
    std::strncpy(buffer, text.c_str(), size - 1);
    buffer[size - 1] = '\0';
    return succeed();
}

}  // extern "C"
