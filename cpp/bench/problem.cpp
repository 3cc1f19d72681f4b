#include "problem.hpp"

namespace rmsnorm_bench {

std::string_view op_name(Op op) {
    switch (op) {
        case Op::kForward:
            return "fwd";
        case Op::kAdd:
            return "add";
        case Op::kBackward:
            return "bwd";
    }
    return "?";
}

std::optional<Op> parse_op(std::string_view name) {
    for (Op op : {Op::kForward, Op::kAdd, Op::kBackward}) {
        if (name == op_name(op)) return op;
    }
    return std::nullopt;
}

int64_t moved_per_element(Op op) {
    switch (op) {
        case Op::kForward:
            return 2;  // read x, write y
        case Op::kAdd:
            return 4;  // read x and residual, write y and the sum
        case Op::kBackward:
            return 3;  // read x and dy, write dx
    }
    return 0;
}

std::optional<rmsnorm_dtype> parse_dtype(std::string_view name) {
    if (name == "bf16") return RMSNORM_BF16;
    if (name == "fp16" || name == "f16") return RMSNORM_F16;
    if (name == "fp32" || name == "f32") return RMSNORM_F32;
    return std::nullopt;
}

std::string_view dtype_name(rmsnorm_dtype dtype) {
    switch (dtype) {
        case RMSNORM_BF16:
            return "bfloat16";
        case RMSNORM_F16:
            return "float16";
        case RMSNORM_F32:
            return "float32";
    }
    return "?";
}

size_t dtype_size(rmsnorm_dtype dtype) { return dtype == RMSNORM_F32 ? 4 : 2; }

std::vector<Shape> default_shapes() {
    // Keep in step with SHAPES in rmsnorm_tools/bench.py: the point is comparing the same rows.
    return {{16384, 4096}, {65536, 4096}, {16384, 8192}, {8192, 16384}, {4096, 32768},
            {32768, 2048}, {131072, 128}, {524288, 128}, {1024, 65536}, {256, 262144}};
}

uint64_t moved_bytes(Op op, rmsnorm_dtype dtype, Shape shape) {
    return static_cast<uint64_t>(shape.m) * static_cast<uint64_t>(shape.n) *
           static_cast<uint64_t>(moved_per_element(op)) * dtype_size(dtype);
}

}  // namespace rmsnorm_bench
