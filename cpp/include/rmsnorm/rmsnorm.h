/* librmsnorm: the C API (stable ABI: plain C types; structs are passed by pointer and only
 * ever grow at their end, with `struct_size` telling the library which version it got).
 *
 * Semantics are the project's contract (docs/DESIGN.md, "Semantics" and "Backward"):
 *   r = rsqrt(sum(x^2) / n + eps)                     (per row, eps and offset as fp32)
 *   llama: y = round(y_dtype, round(x_dtype, x * r) * (w + offset))
 *   gemma: y = round(y_dtype, x * r * (w + offset))
 *   fused add: s = round(residual_dtype, x + residual) is written to residual_out and
 *   normalized in x's place (normalized_sum RMSNORM_SUM_FP32: the unrounded fp32 x + residual
 *   is normalized instead, while the rounded s is still what residual_out gets).
 *   backward: g = dy * (w + offset), xhat = x * r, dx = r * (g - xhat * mean(g * xhat))
 *   (+ dresidual for the fused add), dw = sum over rows of dy * xhat (llama: xhat rounded to
 *   x's dtype first).
 *
 * GPU entry points (rmsnorm_forward, rmsnorm_fused_add_forward, rmsnorm_backward,
 * rmsnorm_fused_add_backward) launch the project's Triton kernels, compiled ahead of time into
 * this library, on raw device pointers in the caller's current CUDA context and stream. The
 * CUDA driver is loaded at run time: with no driver or no GPU they return RMSNORM_ERROR_NO_GPU.
 * They run asynchronously on the stream; errors reported are those of validation and launch.
 * The CPU reference (rmsnorm_cpu_*) computes the same contract on host memory.
 *
 * Errors: every function returns an rmsnorm_status; on failure rmsnorm_last_error() returns a
 * message naming the argument at fault (thread-local, valid until the thread's next call).
 * Every entry point validates its arguments the same way before anything else (the GPU ones
 * before they look for a GPU): RMSNORM_ERROR_INVALID_ARGUMENT for, among others, an enum field
 * holding no enumerator's value, bytes beyond int64 or the address space, and overlaps.
 *
 * Memory: an argument covers the bytes from its data pointer to its last element:
 * (rows - 1) * stride + n elements for rows (n for a single row, whose stride is never used),
 * n elements for weight and dw, `rows` floats for rstd; they must lie within 2^63 - 1 bytes of
 * the pointer and within the address space. An output (y, residual_out, rstd; dx, dw, and the
 * backward's workspace) shares no byte with any other argument, except as exactly the same rows
 * (the same data, stride and dtype) where the contract allows it: y may be x, residual_out may
 * be residual (in place), dx may be dy. Byte ranges are compared, not elements: rows of two
 * arguments interleaved at a common stride are refused too. Inputs may share memory. */
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
    RMSNORM_ERROR_NO_GPU = 3,      /* no CUDA driver, no device, or no current context */
    RMSNORM_ERROR_CUDA = 4,        /* a CUDA driver call failed (the message names it) */
    RMSNORM_ERROR_UNSUPPORTED = 5, /* no kernel built for this dtype combination or GPU arch */
} rmsnorm_status;

/* The CUDA driver's stream handle (cuda.h declares the same type, and the runtime API's
 * cudaStream_t is it too); NULL is the legacy default stream. */
typedef struct CUstream_st* CUstream;

/* rmsnorm_*_args.launch_flags */
enum {
    /* Launch with programmatic dependent launch (sm_90 and later): the kernel may start while
     * the previous one on the stream finishes; it waits for that grid's completion and writes
     * before its first memory access, and lets the next kernel launch early in turn. Where
     * the kernels cannot wait (GPUs before sm_90, or the PTX fallback JIT-compiled for a GPU
     * this build has no cubins for) the flag is ignored: an ordinary launch in stream order. */
    RMSNORM_LAUNCH_PDL = 1,
    /* For a caller that has a split forward of its own (the PyTorch package's Triton
     * launcher): a forward or fused add whose rows take the looped kernel (rows wider than the
     * launch table's widest tile) and are fewer than the SMs / 2 (forward) or / 4 (fused add)
     * returns RMSNORM_ERROR_UNSUPPORTED instead of launching. There that kernel keeps few SMs
     * busy (one program per row: half the speed of a split forward at 32 rows on an H200);
     * librmsnorm has no split forward yet. Backward calls ignore the flag. */
    RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS = 2,
};

typedef enum rmsnorm_dtype {
    RMSNORM_F32 = 0,
    RMSNORM_F16 = 1,
    RMSNORM_BF16 = 2,
} rmsnorm_dtype;

typedef enum rmsnorm_casting_mode {
    RMSNORM_LLAMA = 0, /* HF LlamaRMSNorm, vLLM: x * r rounded to x's dtype first */
    RMSNORM_GEMMA = 1, /* HF GemmaRMSNorm, F.rms_norm: one rounding at the end */
} rmsnorm_casting_mode;

/* What the fused add normalizes (rmsnorm_forward_args.normalized_sum): the sum as written to
 * residual_out, or the fp32 sum before that rounding, as vLLM's fused norm-quant kernels and
 * FlashInfer's fused add compute it (docs/USAGE.md, "Recipes"). With an fp32 residual the two
 * are the same. */
typedef enum rmsnorm_normalized_sum {
    RMSNORM_SUM_ROUNDED = 0,
    RMSNORM_SUM_FP32 = 1, /* fused add only: a plain norm with it is an invalid argument */
} rmsnorm_normalized_sum;

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
    int64_t stride; /* elements; >= 0 for inputs (0: one row read as every row), >= n for outputs */
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
    rmsnorm_accumulation accumulation; /* CPU reference only; the GPU sums in fp32 */
    unsigned launch_flags;             /* GPU: RMSNORM_LAUNCH_* bits, 0 for none */
    /* Version 2. A first version's struct (its sizeof as struct_size: the struct up to
     * launch_flags) reads as RMSNORM_SUM_ROUNDED. reserved keeps the sizes of the two apart
     * (normalized_sum alone would fit in the first version's padding) and must be 0. */
    rmsnorm_normalized_sum normalized_sum;
    uint32_t reserved;
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
    rmsnorm_accumulation accumulation; /* CPU reference only; the GPU sums in fp32 */
    unsigned launch_flags;             /* GPU: RMSNORM_LAUNCH_* bits, 0 for none */
} rmsnorm_backward_args;

/* The quantized forward: the forward's y (the contract's, rounded to y's dtype as
 * rmsnorm_forward stores it), quantized to one byte per element for the next GEMM, with the
 * arithmetic of vLLM's quantizer of each mode (docs/USAGE.md, "Quantized output"). In fp32,
 * IEEE operations (divisions correctly rounded), qmax = 448 (e4m3), 57344 (e5m2), 127 (int8),
 * amax = the largest |y| of the row or group (NaNs skipped; 0 for none):
 *   static:    fp8: q = y * (1 / s); int8: q = y / s        (s = scales[0], read)
 *   per-token: fp8: s = max(min(amax, *scale_ub) / qmax, 1 / (qmax * 512)), q = y / s
 *              int8: s = amax / 127, q = y * (127 / amax) (0 where amax is 0)
 *   per-group: s = max(amax, 1e-10) / qmax (ue8m0: max(s, 1e-10) rounded up to a power of
 *              two, exactly), q = y / s
 * then q saturated to [-qmax, qmax] ([-128, 127] for int8) and converted: fp8 to nearest
 * even; int8 to nearest even. A NaN q becomes +qmax (fp8 static and per-token), 0 (int8
 * static and per-token), -qmax (fp8 per-group) or -128 (int8 per-group). Dynamic scales s
 * are written.
 * quantizer RMSNORM_QUANTIZER_VLLM_FUSED takes the dynamic modes' formulas of vLLM's fused
 * norm-quant kernels instead (static is the same for both):
 *   per-token and per-group: s = max(min(amax, *scale_ub) / qmax, floor), floor 1 / (qmax *
 *              512) for fp8 and FLT_EPSILON for int8 (ue8m0 rounds it up as above);
 *              q = y / s for fp8 rows, else q = y * (1 / s); a NaN q becomes +qmax (fp8) or
 *              0 (int8) in both modes. */
typedef enum rmsnorm_quant_format {
    RMSNORM_QUANT_FP8_E4M3 = 0, /* float8_e4m3fn (no infinities; max 448) */
    RMSNORM_QUANT_INT8 = 1,
    RMSNORM_QUANT_FP8_E5M2 = 2, /* float8_e5m2 (max 57344) */
} rmsnorm_quant_format;

typedef enum rmsnorm_scale_mode {
    RMSNORM_SCALE_STATIC = 0,    /* one dequantization scale given */
    RMSNORM_SCALE_PER_TOKEN = 1, /* one scale per row, from its amax */
    RMSNORM_SCALE_PER_GROUP = 2, /* one per row and group_size columns */
} rmsnorm_scale_mode;

/* Whose formulas the dynamic scales follow (rmsnorm_quant_args.quantizer). */
typedef enum rmsnorm_quantizer {
    RMSNORM_QUANTIZER_VLLM = 0,       /* vLLM's standalone quantizers of each mode */
    RMSNORM_QUANTIZER_VLLM_FUSED = 1, /* vLLM's fused norm-quant kernels */
} rmsnorm_quantizer;

typedef struct rmsnorm_quant_args {
    size_t struct_size; /* sizeof(rmsnorm_quant_args) */
    /* The forward: rows, n, x, residual (data NULL: the plain norm; else the fused add, with
     * residual_out), weight, eps, offset, casting_mode, accumulation (CPU), launch_flags. Its
     * y is the unquantized y: data NULL, not written (its dtype is then ignored: y is rounded
     * to the contract's dtype); else written too, at out_stride (y.stride must equal it).
     * rstd must be NULL. A pointer rather than a member, so that each struct grows at its own
     * end: its own struct_size versions it. */
    const rmsnorm_forward_args* forward;
    void* out;          /* the quantized rows: one byte per element (int8_t, or fp8 bits) */
    int64_t out_stride; /* elements (bytes) between rows; >= n */
    rmsnorm_quant_format format;
    rmsnorm_scale_mode scale_mode;
    int64_t group_size; /* per-group: 64 or 128, dividing n; 0 otherwise */
    /* Static: the one dequantization scale, read. Dynamic: written, row r's (per-token) at
     * scales[r * scale_row_stride], group g of row r's (per-group, g < n / group_size) at
     * scales[r * scale_row_stride + g * scale_group_stride]. */
    float* scales;
    int64_t scale_row_stride;   /* dynamic, more than one row: >= 1 */
    int64_t scale_group_stride; /* per-group: >= 1 (row-major: 1, with scale_row_stride >=
                                 * groups; transposed: scale_row_stride 1 and this >= rows);
                                 * the scales of two rows or groups never share an element */
    const float* scale_ub;      /* NULL, or one float bounding amax: fp8 per-token, and
                                 * per-group under RMSNORM_QUANTIZER_VLLM_FUSED */
    int ue8m0;                  /* per-group: 1 rounds the scales up to powers of two; else 0 */
    /* Version 2. A first version's struct (its sizeof as struct_size: the struct up to ue8m0)
     * reads as RMSNORM_QUANTIZER_VLLM; reserved as in rmsnorm_forward_args, 0. */
    rmsnorm_quantizer quantizer;
    uint32_t reserved;
} rmsnorm_quant_args;

RMSNORM_API const char* rmsnorm_status_string(rmsnorm_status status);
RMSNORM_API const char* rmsnorm_last_error(void);

/* GPU. Pointers are device pointers (or managed memory) of the current context's device;
 * nothing is allocated and nothing is synchronized. What the kernels of this build cover: x,
 * residual, residual_out, y, dy, dx and dresidual of one dtype, and the weight (if any) of that
 * dtype too; n and every row stride below 2^31 elements; for the backward, rows below 2^31
 * (the forward takes any number: it launches at most 2^30 rows at a time). Other combinations
 * return RMSNORM_ERROR_UNSUPPORTED (the Python package computes them). Every pointer a call passes
 * (rstd and the dw workspace included) 16-byte aligned, with n and every row stride a multiple of
 * 16, takes the vectorised kernels; anything else takes their unvectorised twins: slower, and
 * not always bit-identical to them (a kernel that knows its rows aligned sums them in another
 * order; measured on an H200: misaligned pointers, or row strides not multiples of 16 with n
 * one, move some results by an ulp). Allocate rows aligned where bits must match across
 * layouts; the Python package stages such layouts through aligned copies.
 *
 * rmsnorm_forward: the plain norm (residual.data must be NULL).
 * rmsnorm_fused_add_forward: s = x + residual to residual_out (which may be residual), then
 * the norm of s (residual.data must be set). RMSNORM_SUM_FP32 is compiled for fp16 and bf16
 * with a weight in the vectorised layouts (fp32 takes it in any: its sum rounds to itself);
 * elsewhere it returns RMSNORM_ERROR_UNSUPPORTED. */
RMSNORM_API rmsnorm_status rmsnorm_forward(const rmsnorm_forward_args* args, CUstream stream);
RMSNORM_API rmsnorm_status rmsnorm_fused_add_forward(const rmsnorm_forward_args* args,
                                                     CUstream stream);

/* Backward. dw (when wanted) needs a workspace of fp32 partial sums: its size in bytes for
 * these args on the current device is given by rmsnorm_backward_workspace_size (0 when dw is
 * NULL). Pass memory of at least that size, 16-byte aligned for the vectorised kernels and
 * apart from every argument; it may be reused once the stream has passed the call.
 * rmsnorm_backward: dresidual.data must be NULL.
 * rmsnorm_fused_add_backward: dx = the gradient of both x and residual, with dresidual the
 * gradient reaching residual_out (dresidual.data must be set). */
RMSNORM_API rmsnorm_status rmsnorm_backward_workspace_size(const rmsnorm_backward_args* args,
                                                           size_t* bytes);
RMSNORM_API rmsnorm_status rmsnorm_backward(const rmsnorm_backward_args* args, void* workspace,
                                            size_t workspace_bytes, CUstream stream);
RMSNORM_API rmsnorm_status rmsnorm_fused_add_backward(const rmsnorm_backward_args* args,
                                                      void* workspace, size_t workspace_bytes,
                                                      CUstream stream);

/* The quantized forward (plain or fused add, as forward->residual says): y quantized to out,
 * the dynamic scales to scales, residual_out and the unquantized y where asked. Every
 * output (out, dynamic scales, y, residual_out) lies apart from every other argument, but y
 * may be x and residual_out residual, as in the forward. What the kernels of this build
 * cover: x, residual, residual_out and y in fp16 or bf16, all one dtype, with a weight of that
 * dtype; fp8 e4m3 and int8; every mode; every pointer (out, scales and scale_ub included)
 * 16-byte aligned and n and the row strides multiples of 16; n, row strides and the scales'
 * offsets below 2^31; the recipe options where the vendor presets take them:
 * RMSNORM_QUANTIZER_VLLM_FUSED with RMSNORM_LLAMA for the dynamic modes, and with a residual
 * RMSNORM_SUM_FP32 with it (docs/CPP.md). Any other valid call returns
 * RMSNORM_ERROR_UNSUPPORTED, naming what is not compiled (the Python package computes it). It has no split forward: few long rows take
 * the looped kernel, and RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS is ignored. */
RMSNORM_API rmsnorm_status rmsnorm_forward_quant(const rmsnorm_quant_args* args, CUstream stream);

/* Which compiled kernels serve the current context's device: writes e.g. "sm_90 cubins" or
 * "sm_80 PTX, JIT-compiled" to buffer (NUL-terminated, truncated to size). */
RMSNORM_API rmsnorm_status rmsnorm_gpu_kernels(char* buffer, size_t size);

/* The CPU reference implementation. */
RMSNORM_API rmsnorm_status rmsnorm_cpu_forward(const rmsnorm_forward_args* args);
RMSNORM_API rmsnorm_status rmsnorm_cpu_backward(const rmsnorm_backward_args* args);
/* The quantized forward on the CPU: every dtype, weighting and format (fp32 and e5m2 too). */
RMSNORM_API rmsnorm_status rmsnorm_cpu_forward_quant(const rmsnorm_quant_args* args);

/* Conversions with round-to-nearest-even (NaN stays NaN, overflow goes to infinity). */
RMSNORM_API uint16_t rmsnorm_float_to_bf16(float value);
RMSNORM_API float rmsnorm_bf16_to_float(uint16_t bits);
RMSNORM_API uint16_t rmsnorm_float_to_f16(float value);
RMSNORM_API float rmsnorm_f16_to_float(uint16_t bits);

#ifdef __cplusplus
}
#endif

#endif /* RMSNORM_RMSNORM_H */
