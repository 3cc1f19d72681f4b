#include "validate.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "enum_value.hpp"
#include "errors.hpp"

namespace rmsnorm::detail {
namespace {

// Only for validated values (read_args checked them).
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

int64_t element_bytes(rmsnorm_dtype dtype) { return dtype == RMSNORM_F32 ? 4 : 2; }

// An enum field's value for a message, signed: a C caller's -1 reads as -1 whatever the
// underlying type.
template <typename E>
std::string value_text(const E& field) {
    using Signed = std::make_signed_t<std::underlying_type_t<E>>;
    return std::to_string(static_cast<long long>(static_cast<Signed>(enum_value(field))));
}

// ---------------------------------------------------------------------------------------------
// What read_args checks.

rmsnorm_status check_struct_size(size_t struct_size, size_t expected, const char* type) {
    if (struct_size == expected) return RMSNORM_SUCCESS;
    return invalid(std::string("args->struct_size is ") + std::to_string(struct_size) +
                   ", expected sizeof(" + type + ") = " + std::to_string(expected) +
                   " (set it; a mismatch means another version of rmsnorm.h)");
}

rmsnorm_status check_dtype(const char* name, const rmsnorm_dtype& dtype) {
    if (holds_one_of(dtype, {RMSNORM_F32, RMSNORM_F16, RMSNORM_BF16})) return RMSNORM_SUCCESS;
    return invalid(std::string(name) + " is " + value_text(dtype) +
                   ", not an rmsnorm_dtype value (RMSNORM_F32, RMSNORM_F16 or RMSNORM_BF16)");
}

rmsnorm_status check_modes(const rmsnorm_casting_mode& mode,
                           const rmsnorm_accumulation& accumulation) {
    if (!holds_one_of(mode, {RMSNORM_LLAMA, RMSNORM_GEMMA})) {
        return invalid("casting_mode is " + value_text(mode) +
                       ", not RMSNORM_LLAMA or RMSNORM_GEMMA");
    }
    if (!holds_one_of(accumulation, {RMSNORM_ACCUMULATE_F32, RMSNORM_ACCUMULATE_F64})) {
        return invalid("accumulation is " + value_text(accumulation) +
                       ", not RMSNORM_ACCUMULATE_F32 or RMSNORM_ACCUMULATE_F64");
    }
    return RMSNORM_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// What validate checks.

rmsnorm_status check_shape(int64_t rows, int64_t n) {
    if (rows < 0) {
        return invalid("rows is " + std::to_string(rows) + "; it must be >= 0");
    }
    if (n < 1) {
        return invalid("n is " + std::to_string(n) + "; the normalized dimension must be >= 1");
    }
    return RMSNORM_SUCCESS;
}

// One row-set argument: data present when there are rows, and a stride that reaches the next
// row (outputs: past the current one, so that their rows never overlap).
rmsnorm_status check_rows(const char* name, const rmsnorm_rows& rows, int64_t count, int64_t n,
                          bool output) {
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
    return RMSNORM_SUCCESS;
}

rmsnorm_status check_offset(float offset, const void* weight) {
    if (!std::isfinite(offset)) {
        return invalid("offset must be finite");
    }
    if (offset != 0.0f && weight == nullptr) {
        return invalid(
            "offset is added to the weight, but weight is NULL; pass a weight or "
            "offset 0");
    }
    return RMSNORM_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// The bytes each argument covers. Every address an entry point forms lies within them, so
// once they are known to fit in int64 (relative to the data pointer) and in the address space,
// no index or address computed from rows, n and strides can overflow.

// Addresses [first, last]; none when empty.
struct Span {
    uint64_t first = 0, last = 0;
    bool empty = true;
};

// An argument as the overlap rules see it: its bytes, and for rows what makes two arguments
// the same rows. `alias` names the one argument an output may be exactly, if any.
struct Arg {
    const char* name = "";
    Span span;
    bool is_rows = false;
    const void* data = nullptr;
    int64_t stride = 0;
    rmsnorm_dtype dtype = RMSNORM_F32;
    const char* alias = nullptr;
};

constexpr const char* kBeyondInt64 =
    "more than 2^63 - 1 bytes, the most an int64 byte offset holds";

// `bytes` (>= 1) bytes at data.
rmsnorm_status span_at(const std::string& name, const void* data, int64_t bytes, Span* span) {
    const uint64_t first = reinterpret_cast<uintptr_t>(data);
    uint64_t last = 0;
    bool past_end = __builtin_add_overflow(first, static_cast<uint64_t>(bytes - 1), &last);
    if constexpr (sizeof(uintptr_t) < sizeof(uint64_t)) past_end = past_end || last > UINTPTR_MAX;
    if (past_end) {
        return invalid(name + " + " + std::to_string(bytes) +
                       " bytes passes the end of the address space");
    }
    *span = Span{first, last, false};
    return RMSNORM_SUCCESS;
}

// count rows of n elements, row i at data + i * stride elements: the last byte is at
// ((count - 1) * stride + n) * element size - 1. A single row's stride is never used.
rmsnorm_status rows_arg(const char* name, const rmsnorm_rows& r, int64_t count, int64_t n,
                        const char* alias, Arg* arg) {
    *arg = Arg{name, Span{}, true, r.data, r.stride, r.dtype, alias};
    if (count == 0 || r.data == nullptr) return RMSNORM_SUCCESS;
    const int64_t size = element_bytes(r.dtype);
    const bool strided = count > 1;
    int64_t elements = n, bytes = 0;
    // check_rows has made stride >= 0 where it is used.
    if ((strided && (__builtin_mul_overflow(count - 1, r.stride, &elements) ||
                     __builtin_add_overflow(elements, n, &elements))) ||
        __builtin_mul_overflow(elements, size, &bytes)) {
        const std::string sizes = "elements of " + std::to_string(size) + " bytes";
        if (strided) {
            return invalid(std::string(name) + ".stride is " + std::to_string(r.stride) +
                           ": rows = " + std::to_string(count) + " of n = " + std::to_string(n) +
                           " " + sizes + " at that stride span " + kBeyondInt64);
        }
        return invalid("n is " + std::to_string(n) + ": a row of " + name + " (" + sizes +
                       ") spans " + kBeyondInt64);
    }
    return span_at(std::string(name) + ".data", r.data, bytes, &arg->span);
}

// count elements of `size` bytes at data (the weight, dw, rstd).
rmsnorm_status flat_arg(const char* name, const void* data, int64_t count, int64_t size,
                        const char* count_name, Arg* arg) {
    *arg = Arg{};
    arg->name = name;
    if (data == nullptr || count == 0) return RMSNORM_SUCCESS;
    int64_t bytes = 0;
    if (__builtin_mul_overflow(count, size, &bytes)) {
        return invalid(std::string(count_name) + " is " + std::to_string(count) + ": " + name +
                       "'s " + std::to_string(count) + " elements of " + std::to_string(size) +
                       " bytes span " + kBeyondInt64);
    }
    return span_at(name, data, bytes, &arg->span);
}

bool overlap(const Span& a, const Span& b) {
    return !a.empty && !b.empty && a.first <= b.last && b.first <= a.last;
}

// Exactly the same rows: each element is read before it is written, by the same thread.
bool same_rows(const Arg& a, const Arg& b, int64_t rows) {
    return a.is_rows && b.is_rows && a.data == b.data && a.dtype == b.dtype &&
           (rows <= 1 || a.stride == b.stride);
}

// An output and another argument: apart, or (where `out.alias` names it) exactly the same
// rows. Spans are compared, not elements: rows of two arguments interleaved at a common
// stride are refused too.
struct Rule {
    const Arg& out;
    const Arg& other;
};

rmsnorm_status check_rule(const Rule& rule, int64_t rows) {
    const Arg &out = rule.out, &other = rule.other;
    if (!overlap(out.span, other.span)) return RMSNORM_SUCCESS;
    const bool may_alias = out.alias != nullptr && std::strcmp(out.alias, other.name) == 0;
    if (may_alias && same_rows(out, other, rows)) return RMSNORM_SUCCESS;
    std::string message = std::string(out.name) + " overlaps " + other.name;
    if (may_alias) {
        message += ": " + std::string(out.name) + " may be " + other.name +
                   " itself (the same data, stride and dtype) or lie apart from it";
    } else {
        message += ": outputs must lie apart from every other argument";
        if (out.alias != nullptr) {
            message += std::string(" (") + out.name + " may be " + out.alias + " itself)";
        }
    }
    if (out.is_rows && other.is_rows) {
        message += "; interleaved rows are refused too: their byte ranges overlap";
    }
    return invalid(message);
}

rmsnorm_status check_rules(std::initializer_list<Rule> rules, int64_t rows) {
    for (const Rule& rule : rules) {
        if (rmsnorm_status s = check_rule(rule, rows); s != RMSNORM_SUCCESS) return s;
    }
    return RMSNORM_SUCCESS;
}

struct ForwardArgs {
    Arg x, y, residual, residual_out, weight, rstd;
};

rmsnorm_status forward_spans(const rmsnorm_forward_args& a, ForwardArgs* f) {
    const bool fused = a.residual.data != nullptr;
    rmsnorm_status s;
    if ((s = rows_arg("x", a.x, a.rows, a.n, nullptr, &f->x)) != RMSNORM_SUCCESS ||
        (s = rows_arg("y", a.y, a.rows, a.n, "x", &f->y)) != RMSNORM_SUCCESS ||
        (fused && (s = rows_arg("residual", a.residual, a.rows, a.n, nullptr, &f->residual)) !=
                      RMSNORM_SUCCESS) ||
        (fused && (s = rows_arg("residual_out", a.residual_out, a.rows, a.n, "residual",
                                &f->residual_out)) != RMSNORM_SUCCESS) ||
        (s = flat_arg("weight", a.weight, a.n, element_bytes(a.weight_dtype), "n", &f->weight)) !=
            RMSNORM_SUCCESS ||
        (s = flat_arg("rstd", a.rstd, a.rows, sizeof(float), "rows", &f->rstd)) != RMSNORM_SUCCESS)
        return s;
    return RMSNORM_SUCCESS;
}

struct BackwardArgs {
    Arg dy, x, dresidual, dx, weight, rstd, dw;
};

rmsnorm_status backward_spans(const rmsnorm_backward_args& a, BackwardArgs* b) {
    const bool fused = a.dresidual.data != nullptr;
    const int64_t w_size = element_bytes(a.weight_dtype);
    rmsnorm_status s;
    if ((s = rows_arg("dy", a.dy, a.rows, a.n, nullptr, &b->dy)) != RMSNORM_SUCCESS ||
        (s = rows_arg("x", a.x, a.rows, a.n, nullptr, &b->x)) != RMSNORM_SUCCESS ||
        (fused && (s = rows_arg("dresidual", a.dresidual, a.rows, a.n, nullptr, &b->dresidual)) !=
                      RMSNORM_SUCCESS) ||
        (s = rows_arg("dx", a.dx, a.rows, a.n, "dy", &b->dx)) != RMSNORM_SUCCESS ||
        (s = flat_arg("weight", a.weight, a.n, w_size, "n", &b->weight)) != RMSNORM_SUCCESS ||
        (s = flat_arg("rstd", a.rstd, a.rows, sizeof(float), "rows", &b->rstd)) !=
            RMSNORM_SUCCESS ||
        (s = flat_arg("dw", a.dw, a.n, w_size, "n", &b->dw)) != RMSNORM_SUCCESS)
        return s;
    return RMSNORM_SUCCESS;
}

}  // namespace

rmsnorm_dtype output_dtype(rmsnorm_dtype norm_dtype, const void* weight, rmsnorm_dtype weight_dtype,
                           rmsnorm_casting_mode mode) {
    if (weight == nullptr || mode == RMSNORM_GEMMA || weight_dtype == norm_dtype) {
        return norm_dtype;
    }
    return RMSNORM_F32;  // any two different dtypes among f32, f16, bf16 promote to f32
}

rmsnorm_status read_args(const rmsnorm_forward_args* args, rmsnorm_forward_args* out) {
    if (args == nullptr) {
        return invalid("args is NULL");
    }
    // struct_size is first in every version of the struct: safe to read before the rest.
    rmsnorm_status s = check_struct_size(args->struct_size, sizeof *out, "rmsnorm_forward_args");
    if (s != RMSNORM_SUCCESS) return s;
    const rmsnorm_forward_args& a = *args;
    const bool fused = a.residual.data != nullptr;
    if ((s = check_dtype("x.dtype", a.x.dtype)) != RMSNORM_SUCCESS ||
        (s = check_dtype("y.dtype", a.y.dtype)) != RMSNORM_SUCCESS ||
        (fused && (s = check_dtype("residual.dtype", a.residual.dtype)) != RMSNORM_SUCCESS) ||
        (fused &&
         (s = check_dtype("residual_out.dtype", a.residual_out.dtype)) != RMSNORM_SUCCESS) ||
        (a.weight != nullptr &&
         (s = check_dtype("weight_dtype", a.weight_dtype)) != RMSNORM_SUCCESS) ||
        (s = check_modes(a.casting_mode, a.accumulation)) != RMSNORM_SUCCESS)
        return s;
    std::memcpy(out, args, sizeof *out);
    if (!fused) out->residual.dtype = out->residual_out.dtype = out->x.dtype;
    if (out->weight == nullptr) out->weight_dtype = out->x.dtype;
    return RMSNORM_SUCCESS;
}

rmsnorm_status read_args(const rmsnorm_backward_args* args, rmsnorm_backward_args* out) {
    if (args == nullptr) {
        return invalid("args is NULL");
    }
    rmsnorm_status s = check_struct_size(args->struct_size, sizeof *out, "rmsnorm_backward_args");
    if (s != RMSNORM_SUCCESS) return s;
    const rmsnorm_backward_args& a = *args;
    const bool fused = a.dresidual.data != nullptr;
    if ((s = check_dtype("dy.dtype", a.dy.dtype)) != RMSNORM_SUCCESS ||
        (s = check_dtype("x.dtype", a.x.dtype)) != RMSNORM_SUCCESS ||
        (s = check_dtype("dx.dtype", a.dx.dtype)) != RMSNORM_SUCCESS ||
        (fused && (s = check_dtype("dresidual.dtype", a.dresidual.dtype)) != RMSNORM_SUCCESS) ||
        (a.weight != nullptr &&
         (s = check_dtype("weight_dtype", a.weight_dtype)) != RMSNORM_SUCCESS) ||
        (s = check_modes(a.casting_mode, a.accumulation)) != RMSNORM_SUCCESS)
        return s;
    std::memcpy(out, args, sizeof *out);
    if (!fused) out->dresidual.dtype = out->x.dtype;
    if (out->weight == nullptr) out->weight_dtype = out->x.dtype;
    return RMSNORM_SUCCESS;
}

rmsnorm_status validate(const rmsnorm_forward_args& a) {
    rmsnorm_status s = check_shape(a.rows, a.n);
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
    if (!std::isfinite(a.eps) || a.eps < 0.0f) {
        return invalid("eps must be a finite number >= 0, got " + std::to_string(a.eps));
    }
    if ((s = check_offset(a.offset, a.weight)) != RMSNORM_SUCCESS) return s;
    const rmsnorm_dtype expected =
        output_dtype(norm_dtype, a.weight, a.weight_dtype, a.casting_mode);
    if (a.y.dtype != expected) {
        return invalid(std::string("y.dtype is ") + dtype_name(a.y.dtype) + ", expected " +
                       dtype_name(expected) + " for this input, weight and casting_mode");
    }
    ForwardArgs f;
    if ((s = forward_spans(a, &f)) != RMSNORM_SUCCESS) return s;
    // y may be x itself, residual_out the residual itself (in place); rstd is apart from all.
    if ((s = check_rules({{f.y, f.x},
                          {f.y, f.residual},
                          {f.y, f.residual_out},
                          {f.y, f.weight},
                          {f.y, f.rstd},
                          {f.residual_out, f.residual},
                          {f.residual_out, f.x},
                          {f.residual_out, f.weight},
                          {f.residual_out, f.rstd},
                          {f.rstd, f.x},
                          {f.rstd, f.residual},
                          {f.rstd, f.weight}},
                         a.rows)) != RMSNORM_SUCCESS)
        return s;
    return succeed();
}

rmsnorm_status validate(const rmsnorm_backward_args& a) {
    rmsnorm_status s = check_shape(a.rows, a.n);
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
    if (a.dw != nullptr && a.weight == nullptr) {
        return invalid("dw is set but weight is NULL: there is no weight gradient");
    }
    if ((s = check_offset(a.offset, a.weight)) != RMSNORM_SUCCESS) return s;
    BackwardArgs b;
    if ((s = backward_spans(a, &b)) != RMSNORM_SUCCESS) return s;
    // dx may be dy itself (the caller's opt-in); dw is apart from all.
    if ((s = check_rules({{b.dx, b.dy},
                          {b.dx, b.x},
                          {b.dx, b.dresidual},
                          {b.dx, b.weight},
                          {b.dx, b.rstd},
                          {b.dx, b.dw},
                          {b.dw, b.dy},
                          {b.dw, b.x},
                          {b.dw, b.dresidual},
                          {b.dw, b.weight},
                          {b.dw, b.rstd}},
                         a.rows)) != RMSNORM_SUCCESS)
        return s;
    return succeed();
}

rmsnorm_status validate(const rmsnorm_forward_args* args, rmsnorm_forward_args* out) {
    const rmsnorm_status s = read_args(args, out);
    return s != RMSNORM_SUCCESS ? s : validate(*out);
}

rmsnorm_status validate(const rmsnorm_backward_args* args, rmsnorm_backward_args* out) {
    const rmsnorm_status s = read_args(args, out);
    return s != RMSNORM_SUCCESS ? s : validate(*out);
}

rmsnorm_status check_workspace(const rmsnorm_backward_args& a, const void* workspace,
                               size_t bytes) {
    if (workspace == nullptr || bytes == 0) return RMSNORM_SUCCESS;
    BackwardArgs b;
    rmsnorm_status s = backward_spans(a, &b);  // validated: cannot fail
    if (s != RMSNORM_SUCCESS) return s;
    Arg ws;
    ws.name = "workspace";
    if ((s = span_at("workspace", workspace, static_cast<int64_t>(bytes), &ws.span)) !=
        RMSNORM_SUCCESS)
        return s;
    return check_rules({{ws, b.dy},
                        {ws, b.x},
                        {ws, b.dresidual},
                        {ws, b.dx},
                        {ws, b.weight},
                        {ws, b.rstd},
                        {ws, b.dw}},
                       a.rows);
}

}  // namespace rmsnorm::detail
