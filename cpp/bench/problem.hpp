// What one benchmark row measures: an op, a dtype and an M x N shape, with the names and
// byte counts python -m rmsnorm_tools.bench uses for them, so that rows of both compare directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_bench {

enum class Op { kForward, kAdd, kBackward };

struct Shape {
    int64_t m = 0;  // rows
    int64_t n = 0;  // the normalized dimension
};

// "fwd", "add", "bwd": the Python bench's --op names.
std::string_view op_name(Op op);
std::optional<Op> parse_op(std::string_view name);

// Elements an op must move per element of x (the Python bench's MOVED): the fewest bytes it
// could get away with, so that GB/s is comparable to a copy. Weight, dw and rstd not counted.
int64_t moved_per_element(Op op);

// The command-line spelling (bf16, fp16, fp32 as the Python bench has them; f16, f32 too).
std::optional<rmsnorm_dtype> parse_dtype(std::string_view name);
// The name the Python bench writes into its rows (torch's: bfloat16, float16, float32).
std::string_view dtype_name(rmsnorm_dtype dtype);
size_t dtype_size(rmsnorm_dtype dtype);

// The Python bench's default shapes (its SHAPES), the same for every op.
std::vector<Shape> default_shapes();

// Bytes the op must move at this shape and dtype: what GB/s and the copy ceiling are of.
uint64_t moved_bytes(Op op, rmsnorm_dtype dtype, Shape shape);

}  // namespace rmsnorm_bench
