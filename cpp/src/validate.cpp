#include "validate.hpp"

#include <cmath>
#include <cstddef>
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

rmsnorm_status check_struct_size(size_t struct_size, size_t expected, const char* type,
                                 const char* field = "args->struct_size", size_t first = 0) {
    if (struct_size == expected || (first != 0 && struct_size == first)) return RMSNORM_SUCCESS;
    return invalid(std::string(field) + " is " + std::to_string(struct_size) +
                   ", expected sizeof(" + type + ") = " + std::to_string(expected) +
                   (first != 0 ? " (or " + std::to_string(first) + ", its first version's)"
                               : std::string()) +
                   " (set it; a mismatch means another version of rmsnorm.h)");
}

// The sizeof of a struct's first version, whose members end where version 2's begin (at
// `end`): padded to the struct's alignment, as the compiler padded it.
template <typename T>
constexpr size_t first_version_size(size_t end) {
    return (end + alignof(T) - 1) / alignof(T) * alignof(T);
}
constexpr size_t kForwardArgsV1 =
    first_version_size<rmsnorm_forward_args>(offsetof(rmsnorm_forward_args, normalized_sum));
constexpr size_t kQuantArgsV1 =
    first_version_size<rmsnorm_quant_args>(offsetof(rmsnorm_quant_args, quantizer));
static_assert(kForwardArgsV1 < sizeof(rmsnorm_forward_args) &&
                  kQuantArgsV1 < sizeof(rmsnorm_quant_args),
              "version 2 of each struct is longer than the first: struct_size tells them apart");

// A struct of struct_size bytes (checked) into *out, what a first version lacks zero: its
// default.
template <typename T>
void copy_versioned(const T* args, T* out) {
    std::memset(static_cast<void*>(out), 0, sizeof *out);
    std::memcpy(static_cast<void*>(out), args, args->struct_size);
}

rmsnorm_status check_reserved(uint32_t reserved, const char* field) {
    if (reserved == 0) return RMSNORM_SUCCESS;
    return invalid(std::string(field) + " is " + std::to_string(reserved) + "; it must be 0");
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

rmsnorm_status check_normalized_sum(const rmsnorm_normalized_sum& sum, bool fused, bool quant) {
    const char* field = quant ? "forward->normalized_sum" : "normalized_sum";
    if (!holds_one_of(sum, {RMSNORM_SUM_ROUNDED, RMSNORM_SUM_FP32})) {
        return invalid(std::string(field) + " is " + value_text(sum) +
                       ", not RMSNORM_SUM_ROUNDED or RMSNORM_SUM_FP32");
    }
    if (sum == RMSNORM_SUM_FP32 && !fused) {
        return invalid(std::string(field) +
                       " is RMSNORM_SUM_FP32, the fused add's; it needs a residual (residual.data "
                       "is NULL)");
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

// The fields a message names for rows: the pointer and the stride.
struct RowFields {
    std::string data, stride;
};

// count rows of n elements of `size` bytes, row i at data + i * stride elements: the last
// byte is at ((count - 1) * stride + n) * size - 1. A single row's stride is never used.
rmsnorm_status sized_rows_arg(const char* name, const RowFields& fields, const rmsnorm_rows& r,
                              int64_t size, int64_t count, int64_t n, const char* alias, Arg* arg) {
    *arg = Arg{name, Span{}, true, r.data, r.stride, r.dtype, alias};
    if (count == 0 || r.data == nullptr) return RMSNORM_SUCCESS;
    const bool strided = count > 1;
    int64_t elements = n, bytes = 0;
    // check_rows has made stride >= 0 where it is used.
    if ((strided && (__builtin_mul_overflow(count - 1, r.stride, &elements) ||
                     __builtin_add_overflow(elements, n, &elements))) ||
        __builtin_mul_overflow(elements, size, &bytes)) {
        const std::string sizes = "elements of " + std::to_string(size) + " bytes";
        if (strided) {
            return invalid(fields.stride + " is " + std::to_string(r.stride) +
                           ": rows = " + std::to_string(count) + " of n = " + std::to_string(n) +
                           " " + sizes + " at that stride span " + kBeyondInt64);
        }
        return invalid("n is " + std::to_string(n) + ": a row of " + name + " (" + sizes +
                       ") spans " + kBeyondInt64);
    }
    return span_at(fields.data, r.data, bytes, &arg->span);
}

rmsnorm_status rows_arg(const char* name, const rmsnorm_rows& r, int64_t count, int64_t n,
                        const char* alias, Arg* arg) {
    const std::string field(name);
    return sized_rows_arg(name, {field + ".data", field + ".stride"}, r, element_bytes(r.dtype),
                          count, n, alias, arg);
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

// ---------------------------------------------------------------------------------------------
// The forward's checks, shared by the forward and the quantized forward (`quant`: args is its
// `forward`, whose y is optional and then ignored, dtype included).

rmsnorm_status read_forward(const rmsnorm_forward_args* args, rmsnorm_forward_args* out,
                            bool quant) {
    if (args == nullptr) {
        return invalid(quant ? "forward is NULL; point it at the rmsnorm_forward_args of the norm"
                             : "args is NULL");
    }
    // struct_size is first in every version of the struct: safe to read before the rest.
    rmsnorm_status s =
        check_struct_size(args->struct_size, sizeof *out, "rmsnorm_forward_args",
                          quant ? "forward->struct_size" : "args->struct_size", kForwardArgsV1);
    if (s != RMSNORM_SUCCESS) return s;
    rmsnorm_forward_args a;
    copy_versioned(args, &a);
    const bool fused = a.residual.data != nullptr;
    const bool y_used = !quant || a.y.data != nullptr;
    if ((s = check_dtype("x.dtype", a.x.dtype)) != RMSNORM_SUCCESS ||
        (y_used && (s = check_dtype("y.dtype", a.y.dtype)) != RMSNORM_SUCCESS) ||
        (fused && (s = check_dtype("residual.dtype", a.residual.dtype)) != RMSNORM_SUCCESS) ||
        (fused &&
         (s = check_dtype("residual_out.dtype", a.residual_out.dtype)) != RMSNORM_SUCCESS) ||
        (a.weight != nullptr &&
         (s = check_dtype("weight_dtype", a.weight_dtype)) != RMSNORM_SUCCESS) ||
        (s = check_modes(a.casting_mode, a.accumulation)) != RMSNORM_SUCCESS ||
        (s = check_normalized_sum(a.normalized_sum, fused, quant)) != RMSNORM_SUCCESS ||
        (s = check_reserved(a.reserved, quant ? "forward->reserved" : "reserved")) !=
            RMSNORM_SUCCESS)
        return s;
    *out = a;
    if (!fused) out->residual.dtype = out->residual_out.dtype = out->x.dtype;
    if (out->weight == nullptr) out->weight_dtype = out->x.dtype;
    if (!y_used) {
        out->y.dtype = output_dtype(fused ? out->residual.dtype : out->x.dtype, out->weight,
                                    out->weight_dtype, out->casting_mode);
    }
    return RMSNORM_SUCCESS;
}

rmsnorm_status validate_forward(const rmsnorm_forward_args& a, bool y_optional, ForwardArgs* f) {
    rmsnorm_status s = check_shape(a.rows, a.n);
    if (s != RMSNORM_SUCCESS) return s;
    if ((s = check_rows("x", a.x, a.rows, a.n, false)) != RMSNORM_SUCCESS) return s;
    if (!(y_optional && a.y.data == nullptr) &&
        (s = check_rows("y", a.y, a.rows, a.n, true)) != RMSNORM_SUCCESS)
        return s;
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
    if ((s = forward_spans(a, f)) != RMSNORM_SUCCESS) return s;
    // y may be x itself, residual_out the residual itself (in place); rstd is apart from all.
    return check_rules({{f->y, f->x},
                        {f->y, f->residual},
                        {f->y, f->residual_out},
                        {f->y, f->weight},
                        {f->y, f->rstd},
                        {f->residual_out, f->residual},
                        {f->residual_out, f->x},
                        {f->residual_out, f->weight},
                        {f->residual_out, f->rstd},
                        {f->rstd, f->x},
                        {f->rstd, f->residual},
                        {f->rstd, f->weight}},
                       a.rows);
}

// ---------------------------------------------------------------------------------------------
// The quantized forward's own fields.

rmsnorm_status check_group(const rmsnorm_quant_args& q, int64_t n, int64_t* groups) {
    *groups = 1;
    if (q.scale_mode != RMSNORM_SCALE_PER_GROUP) {
        if (q.group_size == 0) return RMSNORM_SUCCESS;
        return invalid("group_size is " + std::to_string(q.group_size) +
                       "; it is for RMSNORM_SCALE_PER_GROUP (0 otherwise)");
    }
    if (q.group_size != 64 && q.group_size != 128) {
        return invalid("group_size is " + std::to_string(q.group_size) +
                       "; per-group scales take groups of 64 or 128");
    }
    if (n % q.group_size != 0) {
        return invalid("group_size " + std::to_string(q.group_size) +
                       " does not divide n = " + std::to_string(n));
    }
    *groups = n / q.group_size;
    return RMSNORM_SUCCESS;
}

rmsnorm_status check_options(const rmsnorm_quant_args& q) {
    if (q.scale_ub != nullptr) {
        if (q.format == RMSNORM_QUANT_INT8) {
            return invalid(
                "scale_ub is set; it bounds per-token fp8 scales, and int8 takes none (NULL)");
        }
        if (q.scale_mode == RMSNORM_SCALE_STATIC) {
            return invalid(
                "scale_ub is set; it bounds dynamic scales, and static quantization takes none "
                "(NULL)");
        }
        if (q.scale_mode == RMSNORM_SCALE_PER_GROUP &&
            q.quantizer != RMSNORM_QUANTIZER_VLLM_FUSED) {
            return invalid(
                "scale_ub is set with per-group scales; it bounds them as vLLM's fused "
                "per-block kernel does, under quantizer RMSNORM_QUANTIZER_VLLM_FUSED (the "
                "default quantizer, vLLM's group quantizer, takes no bound: NULL)");
        }
    }
    if (q.ue8m0 != 0 && q.ue8m0 != 1) {
        return invalid("ue8m0 is " + std::to_string(q.ue8m0) + "; it must be 0 or 1");
    }
    if (q.ue8m0 == 1 && q.scale_mode != RMSNORM_SCALE_PER_GROUP) {
        return invalid("ue8m0 is 1; it rounds per-group scales (RMSNORM_SCALE_PER_GROUP) alone");
    }
    return RMSNORM_SUCCESS;
}

// The dynamic scales' strides: rows x groups elements, no two of them the same (each is
// written by one program). The layouts that lie apart by construction are accepted: rows of
// groups (row-major, padding allowed) and groups of rows (transposed).
rmsnorm_status check_scale_strides(const rmsnorm_quant_args& q, int64_t rows, int64_t groups) {
    if (q.scale_mode == RMSNORM_SCALE_STATIC) return RMSNORM_SUCCESS;
    const int64_t row = q.scale_row_stride, group = q.scale_group_stride;
    if (q.scale_mode == RMSNORM_SCALE_PER_TOKEN || groups == 1) {
        if (rows <= 1 || row >= 1) return RMSNORM_SUCCESS;
        return invalid("scale_row_stride is " + std::to_string(row) +
                       "; each row's scale needs an element of its own: it must be >= 1");
    }
    if (rows <= 1) {
        if (group >= 1) return RMSNORM_SUCCESS;
        return invalid("scale_group_stride is " + std::to_string(group) +
                       "; each group's scale needs an element of its own: it must be >= 1");
    }
    int64_t row_span = 0, group_span = 0;
    const bool row_major =
        group >= 1 && !__builtin_mul_overflow(groups, group, &group_span) && row >= group_span;
    const bool transposed =
        row >= 1 && !__builtin_mul_overflow(rows, row, &row_span) && group >= row_span;
    if (row_major || transposed) return RMSNORM_SUCCESS;
    return invalid("scale_row_stride " + std::to_string(row) + " and scale_group_stride " +
                   std::to_string(group) + " put scales of two rows or groups at one element: " +
                   std::to_string(rows) + " rows of " + std::to_string(groups) +
                   " groups need scale_row_stride >= groups * scale_group_stride (row-major) "
                   "or scale_group_stride >= rows * scale_row_stride (transposed), both >= 1");
}

// The scales' bytes: one float (static), or the last element's offset + 1 floats.
rmsnorm_status scales_arg(const rmsnorm_quant_args& q, int64_t rows, int64_t groups, Arg* arg) {
    *arg = Arg{};
    arg->name = "scales";
    if (q.scales == nullptr || rows == 0) return RMSNORM_SUCCESS;
    int64_t count = 1;
    if (q.scale_mode != RMSNORM_SCALE_STATIC) {
        int64_t last_row = 0, last_group = 0;
        if ((rows > 1 && __builtin_mul_overflow(rows - 1, q.scale_row_stride, &last_row)) ||
            (groups > 1 && __builtin_mul_overflow(groups - 1, q.scale_group_stride, &last_group)) ||
            __builtin_add_overflow(last_row, last_group, &count) ||
            __builtin_add_overflow(count, int64_t{1}, &count) ||
            count > INT64_MAX / int64_t{sizeof(float)}) {
            return invalid("scale_row_stride and scale_group_stride: the scales of " +
                           std::to_string(rows) + " rows of " + std::to_string(groups) +
                           " groups at these strides span " + kBeyondInt64);
        }
    }
    return flat_arg("scales", q.scales, count, sizeof(float), "scale_row_stride", arg);
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
    return read_forward(args, out, false);
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
    ForwardArgs f;
    return validate_forward(a, false, &f);
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

rmsnorm_status validate(const rmsnorm_quant_args* args, QuantArgs* out) {
    if (args == nullptr) return invalid("args is NULL");
    rmsnorm_status s = check_struct_size(args->struct_size, sizeof out->quant,
                                         "rmsnorm_quant_args", "args->struct_size", kQuantArgsV1);
    if (s != RMSNORM_SUCCESS) return s;
    copy_versioned(args, &out->quant);
    if ((s = read_forward(args->forward, &out->forward, true)) != RMSNORM_SUCCESS) return s;
    args = &out->quant;  // the version-2 view, defaults filled in
    if (!holds_one_of(args->format,
                      {RMSNORM_QUANT_FP8_E4M3, RMSNORM_QUANT_INT8, RMSNORM_QUANT_FP8_E5M2})) {
        return invalid("format is " + value_text(args->format) +
                       ", not RMSNORM_QUANT_FP8_E4M3, RMSNORM_QUANT_INT8 or "
                       "RMSNORM_QUANT_FP8_E5M2");
    }
    if (!holds_one_of(args->scale_mode,
                      {RMSNORM_SCALE_STATIC, RMSNORM_SCALE_PER_TOKEN, RMSNORM_SCALE_PER_GROUP})) {
        return invalid("scale_mode is " + value_text(args->scale_mode) +
                       ", not RMSNORM_SCALE_STATIC, RMSNORM_SCALE_PER_TOKEN or "
                       "RMSNORM_SCALE_PER_GROUP");
    }
    if (!holds_one_of(args->quantizer, {RMSNORM_QUANTIZER_VLLM, RMSNORM_QUANTIZER_VLLM_FUSED})) {
        return invalid("quantizer is " + value_text(args->quantizer) +
                       ", not RMSNORM_QUANTIZER_VLLM or RMSNORM_QUANTIZER_VLLM_FUSED");
    }
    if ((s = check_reserved(args->reserved, "reserved")) != RMSNORM_SUCCESS) return s;
    out->quant.forward = &out->forward;
    const rmsnorm_quant_args& q = out->quant;
    const rmsnorm_forward_args& f = out->forward;

    if (f.rstd != nullptr) {
        return invalid("forward->rstd is set; the quantized forward writes no rstd (NULL)");
    }
    ForwardArgs fa;
    if ((s = validate_forward(f, true, &fa)) != RMSNORM_SUCCESS) return s;
    if ((s = check_group(q, f.n, &out->groups)) != RMSNORM_SUCCESS ||
        (s = check_options(q)) != RMSNORM_SUCCESS)
        return s;
    const rmsnorm_rows out_rows{q.out, q.out_stride, RMSNORM_F32};
    if (f.rows > 0 && q.out == nullptr) return invalid("out is NULL");
    if (f.rows > 1 && q.out_stride < f.n) {
        return invalid("out_stride is " + std::to_string(q.out_stride) +
                       "; output rows must not overlap: it must be >= n = " + std::to_string(f.n));
    }
    if (f.rows > 1 && f.y.data != nullptr && f.y.stride != q.out_stride) {
        return invalid("y.stride is " + std::to_string(f.y.stride) + ", out_stride " +
                       std::to_string(q.out_stride) +
                       "; the kernels address y and out with one row stride: they must be equal");
    }
    if (f.rows > 0 && q.scales == nullptr) return invalid("scales is NULL");
    if ((s = check_scale_strides(q, f.rows, out->groups)) != RMSNORM_SUCCESS) return s;

    Arg out_arg, scales, scale_ub;
    if ((s = sized_rows_arg("out", {"out", "out_stride"}, out_rows, 1, f.rows, f.n, nullptr,
                            &out_arg)) != RMSNORM_SUCCESS ||
        (s = scales_arg(q, f.rows, out->groups, &scales)) != RMSNORM_SUCCESS ||
        (s = flat_arg("scale_ub", f.rows > 0 ? q.scale_ub : nullptr, 1, sizeof(float), "rows",
                      &scale_ub)) != RMSNORM_SUCCESS)
        return s;
    // out and the dynamic scales lie apart from everything; a static scale is an input, which
    // the outputs (out, y, residual_out) lie apart from.
    const bool dynamic = q.scale_mode != RMSNORM_SCALE_STATIC;
    if ((s = check_rules({{out_arg, fa.x},
                          {out_arg, fa.residual},
                          {out_arg, fa.residual_out},
                          {out_arg, fa.weight},
                          {out_arg, fa.y},
                          {out_arg, scales},
                          {out_arg, scale_ub},
                          {fa.y, scales},
                          {fa.y, scale_ub},
                          {fa.residual_out, scales},
                          {fa.residual_out, scale_ub}},
                         f.rows)) != RMSNORM_SUCCESS ||
        (dynamic &&
         (s = check_rules(
              {{scales, fa.x}, {scales, fa.residual}, {scales, fa.weight}, {scales, scale_ub}},
              f.rows)) != RMSNORM_SUCCESS))
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
