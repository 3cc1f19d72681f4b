#include "fill.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_check.hpp"
#include "problem.hpp"

namespace rmsnorm_bench {
namespace {

constexpr int64_t kBlockElements = int64_t{1} << 20;

// One block of values in dtype's bytes, rounded as the library rounds (nearest even).
std::vector<unsigned char> host_block(int64_t count, rmsnorm_dtype dtype, uint64_t seed, float mean,
                                      float stddev) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(mean, stddev);
    const size_t size = dtype_size(dtype);
    std::vector<unsigned char> bytes(static_cast<size_t>(count) * size);
    for (int64_t i = 0; i < count; ++i) {
        const float v = normal(rng);
        unsigned char* out = bytes.data() + static_cast<size_t>(i) * size;
        if (dtype == RMSNORM_F32) {
            std::memcpy(out, &v, sizeof v);
        } else {
            const uint16_t h =
                dtype == RMSNORM_BF16 ? rmsnorm_float_to_bf16(v) : rmsnorm_float_to_f16(v);
            std::memcpy(out, &h, sizeof h);
        }
    }
    return bytes;
}

}  // namespace

void fill_normal(void* dst, int64_t count, rmsnorm_dtype dtype, uint64_t seed, float mean,
                 float stddev) {
    if (count <= 0) return;
    const int64_t block = std::min(count, kBlockElements);
    const std::vector<unsigned char> bytes = host_block(block, dtype, seed, mean, stddev);
    auto* base = static_cast<unsigned char*>(dst);
    cuda_check(cudaMemcpy(base, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
               "cudaMemcpy (input upload)");
    // Then double what is filled with device copies: log2(count / block) copies.
    const size_t total = static_cast<size_t>(count) * dtype_size(dtype);
    for (size_t filled = bytes.size(); filled < total;) {
        const size_t chunk = std::min(filled, total - filled);
        cuda_check(cudaMemcpy(base + filled, base, chunk, cudaMemcpyDeviceToDevice),
                   "cudaMemcpy (input fill)");
        filled += chunk;
    }
}

}  // namespace rmsnorm_bench
