/* librmsnorm: the C API (stable ABI: plain C types; structs are passed by pointer and only
 * ever grow at their end, with `struct_size` telling the library which version it got).
 *
 * Semantics are DESIGN.md's contract (../shared/docs/DESIGN.md, "Semantics" and "Backward"):
 *   r = rsqrt(sum(x^2) / n + eps)                     (per row, eps and offset as fp32)
 *   llama: y = round(y_dtype, round(x_dtype, x * r) * (w + offset))
 *   gemma: y = round(y_dtype, x * r * (w + offset))
 *   fused add: s = round(residual_dtype, x + residual) is written to residual_out and
 *   normalized in x's place.
 *   backward: g = dy * (w + offset), xhat = x * r, dx = r * (g - xhat * mean(g * xhat))
 *   (+ dresidual for the fused add), dw = sum over rows of dy * xhat (llama: xhat rounded to
 *   x's dtype first).
 *
 * This version implements the CPU reference (rmsnorm_cpu_*). The GPU entry points (AOT-compiled
 * Triton kernels) are not implemented yet.
 *
 * Errors: every function returns an rmsnorm_status; on failure rmsnorm_last_error() returns a
 * message naming the argument at fault (thread-local, valid until the thread's next call). */
#ifndef RMSNORM_RMSNORM_H
#define RMSNORM_RMSNORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define RMSNORM_API
#else
#define RMSNORM_API __attribute__((visibility("default")))
#endif

typedef enum rmsnorm_status {
    RMSNORM_SUCCESS = 0,
    RMSNORM_ERROR_INVALID_ARGUMENT = 1,
    RMSNORM_ERROR_NOT_IMPLEMENTED = 2,
} rmsnorm_status;

typedef enum rmsnorm_dtype {
    RMSNORM_F32 = 0,
    RMSNORM_F16 = 1,
    RMSNORM_BF16 = 2,
} rmsnorm_dtype;

typedef enum rmsnorm_casting_mode {
    RMSNORM_LLAMA = 0, /* HF LlamaRMSNorm, vLLM: x * r rounded to x's dtype first */
    RMSNORM_GEMMA = 1, /* HF GemmaRMSNorm, F.rms_norm: one rounding at the end */
} rmsnorm_casting_mode;

/* What the CPU reference accumulates sums in: fp32 as the contract (and the GPU) does, or
 * fp64 for a more exact reference. */
typedef enum rmsnorm_accumulation {
    RMSNORM_ACCUMULATE_F32 = 0,
    RMSNORM_ACCUMULATE_F64 = 1,
} rmsnorm_accumulation;

/* Rows of a 2-D tensor: row i starts at data + i * stride elements; the n elements of a row
 * are contiguous. */
typedef struct rmsnorm_rows {
    void* data;
    int64_t stride;
    rmsnorm_dtype dtype;
} rmsnorm_rows;

typedef struct rmsnorm_forward_args {
    size_t struct_size; /* sizeof(rmsnorm_forward_args) */
    int64_t rows;       /* >= 0; 0 does nothing */
    int64_t n;          /* >= 1 */
    rmsnorm_rows x;
    rmsnorm_rows residual;     /* data NULL: plain norm; else the fused residual add */
    rmsnorm_rows residual_out; /* fused add: where the sum goes (may be residual itself) */
    const void* weight;        /* n elements of weight_dtype, or NULL (then offset must be 0) */
    rmsnorm_dtype weight_dtype;
    rmsnorm_rows y;
    float* rstd; /* NULL, or `rows` floats: 1 / rms of each row */
    float eps;   /* finite, >= 0 */
    float offset;
    rmsnorm_casting_mode casting_mode;
    rmsnorm_accumulation accumulation; /* CPU reference only */
} rmsnorm_forward_args;

typedef struct rmsnorm_backward_args {
    size_t struct_size; /* sizeof(rmsnorm_backward_args) */
    int64_t rows;
    int64_t n;
    rmsnorm_rows dy;
    rmsnorm_rows x;         /* the norm's input (the fused add's sum) */
    rmsnorm_rows dresidual; /* data NULL, or the gradient of residual_out (fused add) */
    rmsnorm_rows dx;        /* x's dtype; the gradient of x (and of residual, fused) */
    const float* rstd;      /* `rows` floats saved by the forward */
    const void* weight;     /* NULL: no weight */
    rmsnorm_dtype weight_dtype;
    void* dw; /* NULL: not wanted; else n elements of weight_dtype */
    float offset;
    rmsnorm_casting_mode casting_mode;
    rmsnorm_accumulation accumulation; /* CPU reference only */
} rmsnorm_backward_args;

RMSNORM_API const char* rmsnorm_status_string(rmsnorm_status status);
RMSNORM_API const char* rmsnorm_last_error(void);

/* The CPU reference implementation. */
RMSNORM_API rmsnorm_status rmsnorm_cpu_forward(const rmsnorm_forward_args* args);
RMSNORM_API rmsnorm_status rmsnorm_cpu_backward(const rmsnorm_backward_args* args);

/* Conversions with round-to-nearest-even (NaN stays NaN, overflow goes to infinity). */
RMSNORM_API uint16_t rmsnorm_float_to_bf16(float value);
RMSNORM_API float rmsnorm_bf16_to_float(uint16_t bits);
RMSNORM_API uint16_t rmsnorm_float_to_f16(float value);
RMSNORM_API float rmsnorm_f16_to_float(uint16_t bits);

#ifdef __cplusplus
}
#endif

#endif /* RMSNORM_RMSNORM_H */
