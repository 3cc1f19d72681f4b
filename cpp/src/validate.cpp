#include "validate.hpp"

#include <cmath>
#include <string>

#include "errors.hpp"

namespace rmsnorm::detail {
namespace {

bool valid_dtype(rmsnorm_dtype dtype) {
    return dtype == RMSNORM_F32 || dtype == RMSNORM_F16 || dtype == RMSNORM_BF16;
}

const char* dtype_name(rmsnorm_dtype dtype) {
    switch (dtype) {
        case RMSNORM_F32:
            return "RMSNORM_F32";
        case RMSNORM_F16:
            return "RMSNORM_F16";
        case RMSNORM_BF16:
            return "RMSNORM_BF16";
    }
    return "an unknown dtype";
}

// Checks one row-set argument: dtype, data present when there are rows, and a stride that
// reaches the next row (outputs: past the current one, so rows never overlap).
rmsnorm_status check_rows(const char* name, const rmsnorm_rows& rows, int64_t count, int64_t n,
                          bool output) {
    if (!valid_dtype(rows.dtype)) {
        return invalid(std::string(name) + ".dtype is not an rmsnorm_dtype value");
    }
    if (count > 0 && rows.data == nullptr) {
        return invalid(std::string(name) + ".data is NULL");
    }
    const int64_t least = output ? n : 0;
    if (count > 1 && rows.stride < least) {
        return invalid(
            std::string(name) + ".stride is " + std::to_string(rows.stride) +
            (output ? "; output rows must not overlap: it must be >= n = " + std::to_string(n)
                    : "; it must be >= 0"));
    }
    return succeed();
}

rmsnorm_status check_shape(size_t struct_size, size_t expected, const char* type, int64_t rows,
                           int64_t n) {
    if (struct_size != expected) {
        return invalid(std::string("args->struct_size is ") + std::to_string(struct_size) +
                       ", expected sizeof(" + type + ") = " + std::to_string(expected) +
                       " (set it; a mismatch means another version of rmsnorm.h)");
    }
    if (rows < 0) {
        return invalid("rows is " + std::to_string(rows) + "; it must be >= 0");
    }
    if (n < 1) {
        return invalid("n is " + std::to_string(n) + "; the normalized dimension must be >= 1");
    }
    return succeed();
}

rmsnorm_status check_mode(rmsnorm_casting_mode mode, rmsnorm_accumulation accumulation,
                          float offset, const void* weight) {
    if (mode != RMSNORM_LLAMA && mode != RMSNORM_GEMMA) {
        return invalid("casting_mode is not RMSNORM_LLAMA or RMSNORM_GEMMA");
    }
    if (accumulation != RMSNORM_ACCUMULATE_F32 && accumulation != RMSNORM_ACCUMULATE_F64) {
        return invalid("accumulation is not RMSNORM_ACCUMULATE_F32 or RMSNORM_ACCUMULATE_F64");
    }
    if (!std::isfinite(offset)) {
        return invalid("offset must be finite");
    }
    if (offset != 0.0f && weight == nullptr) {
        return invalid(
            "offset is added to the weight, but weight is NULL; pass a weight or "
            "offset 0");
    }
    return succeed();
}

}  // namespace

rmsnorm_dtype output_dtype(rmsnorm_dtype norm_dtype, const void* weight, rmsnorm_dtype weight_dtype,
                           rmsnorm_casting_mode mode) {
    if (weight == nullptr || mode == RMSNORM_GEMMA || weight_dtype == norm_dtype) {
        return norm_dtype;
    }
    return RMSNORM_F32;  // any two different dtypes among f32, f16, bf16 promote to f32
}

rmsnorm_status validate(const rmsnorm_forward_args* args) {
    if (args == nullptr) {
        return invalid("args is NULL");
    }
    const auto& a = *args;
    rmsnorm_status s = check_shape(a.struct_size, sizeof(rmsnorm_forward_args),
                                   "rmsnorm_forward_args", a.rows, a.n);
    if (s != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("x", a.x, a.rows, a.n, false)) != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("y", a.y, a.rows, a.n, true)) != RMSNORM_SUCCESS) return s;
    const bool fused = a.residual.data != nullptr;
    rmsnorm_dtype norm_dtype = a.x.dtype;
    if (fused) {
        if ((s = check_rows("residual", a.residual, a.rows, a.n, false)) != RMSNORM_SUCCESS)
            return s;
        if ((s = check_rows("residual_out", a.residual_out, a.rows, a.n, true)) != RMSNORM_SUCCESS)
            return s;
        if (a.residual_out.dtype != a.residual.dtype) {
            return invalid(
                std::string("residual_out.dtype is ") + dtype_name(a.residual_out.dtype) +
                "; the sum is stored in the residual's dtype, " + dtype_name(a.residual.dtype));
        }
        norm_dtype = a.residual.dtype;
    } else if (a.residual_out.data != nullptr) {
        return invalid("residual_out is set but residual.data is NULL (no fused add)");
    }
    if (a.weight != nullptr && !valid_dtype(a.weight_dtype)) {
        return invalid("weight_dtype is not an rmsnorm_dtype value");
    }
    if (!std::isfinite(a.eps) || a.eps < 0.0f) {
        return invalid("eps must be a finite number >= 0, got " + std::to_string(a.eps));
    }
    if ((s = check_mode(a.casting_mode, a.accumulation, a.offset, a.weight)) != RMSNORM_SUCCESS)
        return s;
    const rmsnorm_dtype expected =
        output_dtype(norm_dtype, a.weight, a.weight_dtype, a.casting_mode);
    if (a.y.dtype != expected) {
        return invalid(std::string("y.dtype is ") + dtype_name(a.y.dtype) + ", expected " +
                       dtype_name(expected) + " for this input, weight and casting_mode");
    }
    return succeed();
}

rmsnorm_status validate(const rmsnorm_backward_args* args) {
    if (args == nullptr) {
        return invalid("args is NULL");
    }
    const auto& a = *args;
    rmsnorm_status s = check_shape(a.struct_size, sizeof(rmsnorm_backward_args),
                                   "rmsnorm_backward_args", a.rows, a.n);
    if (s != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("dy", a.dy, a.rows, a.n, false)) != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("x", a.x, a.rows, a.n, false)) != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("dx", a.dx, a.rows, a.n, true)) != RMSNORM_SUCCESS) return s;
    if (a.dx.dtype != a.x.dtype) {
        return invalid(std::string("dx.dtype is ") + dtype_name(a.dx.dtype) + ", expected x's, " +
                       dtype_name(a.x.dtype));
    }
    if (a.dresidual.data != nullptr) {
        if ((s = check_rows("dresidual", a.dresidual, a.rows, a.n, false)) != RMSNORM_SUCCESS)
            return s;
    }
    if (a.rows > 0 && a.rstd == nullptr) {
        return invalid("rstd is NULL; pass the forward's saved 1/rms per row");
    }
    if (a.weight != nullptr && !valid_dtype(a.weight_dtype)) {
        return invalid("weight_dtype is not an rmsnorm_dtype value");
    }
    if (a.dw != nullptr && a.weight == nullptr) {
        return invalid("dw is set but weight is NULL: there is no weight gradient");
    }
    return check_mode(a.casting_mode, a.accumulation, a.offset, a.weight);
}

}  // namespace rmsnorm::detail
