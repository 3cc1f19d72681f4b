// Uses librmsnorm as an inference engine or trainer would: forward, fused residual add and
// backward on device memory and a CUDA stream, checked against the library's CPU reference.
// Without a GPU it runs the CPU reference alone and says so (exit status 0).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "rmsnorm/rmsnorm.hpp"

namespace {

using Bf16 = uint16_t;

void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// Device memory for n elements of T, freed when it goes out of scope.
template <typename T>
class DeviceArray {
 public:
    explicit DeviceArray(size_t n) : n_(n) {
        void* p = nullptr;
        cuda_check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
        data_.reset(static_cast<T*>(p));
    }
    explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
        cuda_check(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
                   "cudaMemcpy");
    }
    T* get() const { return data_.get(); }
    std::vector<T> to_host() const {
        std::vector<T> host(n_);
        cuda_check(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost),
                   "cudaMemcpy");
        return host;
    }

 private:
    struct Free {
        void operator()(T* p) const { cudaFree(p); }
    };
    size_t n_;
    std::unique_ptr<T, Free> data_;
};

std::vector<Bf16> random_bf16(size_t n, std::mt19937& rng) {
    std::normal_distribution<float> dist;
    std::vector<Bf16> v(n);
    for (auto& e : v) e = rmsnorm_float_to_bf16(dist(rng));
    return v;
}

// Largest difference in bf16 units in the last place of each element (y, the sum).
double max_ulps(const std::vector<Bf16>& a, const std::vector<Bf16>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const float fa = rmsnorm_bf16_to_float(a[i]), fb = rmsnorm_bf16_to_float(b[i]);
        const float ulp = std::ldexp(1.0f, std::ilogb(std::fmax(std::fabs(fb), 1e-30f)) - 7);
        worst = std::fmax(worst, std::fabs(fa - fb) / ulp);
    }
    return worst;
}

// Largest difference in units of bf16's epsilon times the reference's largest magnitude:
// gradients are differences of near-equal terms, so elementwise ulps of their small elements
// say nothing about the sums' order.
double max_normwise(const std::vector<Bf16>& a, const std::vector<Bf16>& b) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double fa = rmsnorm_bf16_to_float(a[i]), fb = rmsnorm_bf16_to_float(b[i]);
        worst = std::fmax(worst, std::fabs(fa - fb));
        scale = std::fmax(scale, std::fabs(fb));
    }
    return worst / (scale * std::ldexp(1.0, -8));
}

rmsnorm_rows rows_of(void* data, int64_t stride) { return {data, stride, RMSNORM_BF16}; }

}  // namespace

int main() {
    const int64_t rows = 512, n = 4096;
    const size_t count = static_cast<size_t>(rows * n);
    std::mt19937 rng(std::random_device{}());
    auto x = random_bf16(count, rng), residual = random_bf16(count, rng);
    auto dy = random_bf16(count, rng), weight = random_bf16(static_cast<size_t>(n), rng);

    // The CPU reference: the fused add's sum, the norm, rstd, and the backward.
    std::vector<Bf16> ref_y(count), ref_s(count), ref_dx(count), ref_dw(n);
    std::vector<float> ref_rstd(rows);
    rmsnorm_forward_args f = rmsnorm::forward_args();
    f.rows = rows;
    f.n = n;
    f.x = rows_of(x.data(), n);
    f.residual = rows_of(residual.data(), n);
    f.residual_out = rows_of(ref_s.data(), n);
    f.weight = weight.data();
    f.weight_dtype = RMSNORM_BF16;
    f.y = rows_of(ref_y.data(), n);
    f.rstd = ref_rstd.data();
    rmsnorm::cpu_forward(f);
    rmsnorm_backward_args b = rmsnorm::backward_args();
    b.rows = rows;
    b.n = n;
    b.dy = rows_of(dy.data(), n);
    b.x = rows_of(ref_s.data(), n);
    b.dx = rows_of(ref_dx.data(), n);
    b.rstd = ref_rstd.data();
    b.weight = weight.data();
    b.weight_dtype = RMSNORM_BF16;
    b.dw = ref_dw.data();
    rmsnorm::cpu_backward(b);

    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no GPU: ran the CPU reference only (%lld x %lld bf16)\n",
                    static_cast<long long>(rows), static_cast<long long>(n));
        return 0;
    }
    cuda_check(cudaSetDevice(0), "cudaSetDevice");  // makes the primary context current
    cudaStream_t stream = nullptr;
    cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
    const CUstream cu_stream = reinterpret_cast<CUstream>(stream);

    DeviceArray<Bf16> d_x(x), d_res(residual), d_w(weight), d_dy(dy), d_y(count), d_dx(count),
        d_dw(static_cast<size_t>(n));
    DeviceArray<float> d_rstd(static_cast<size_t>(rows));

    // Fused add in place (the residual stream becomes x + residual), then the backward.
    f.x = rows_of(d_x.get(), n);
    f.residual = f.residual_out = rows_of(d_res.get(), n);
    f.weight = d_w.get();
    f.y = rows_of(d_y.get(), n);
    f.rstd = d_rstd.get();
    rmsnorm::fused_add_forward(f, cu_stream);

    b.dy = rows_of(d_dy.get(), n);
    b.x = rows_of(d_res.get(), n);
    b.dx = rows_of(d_dx.get(), n);
    b.rstd = d_rstd.get();
    b.weight = d_w.get();
    b.dw = d_dw.get();
    const size_t workspace_bytes = rmsnorm::backward_workspace_size(b);
    DeviceArray<unsigned char> workspace(workspace_bytes);
    rmsnorm::backward(b, workspace.get(), workspace_bytes, cu_stream);

    // The plain norm of the sum, into y again.
    f.x = rows_of(d_res.get(), n);
    f.residual = f.residual_out = rmsnorm_rows{};
    f.rstd = nullptr;
    DeviceArray<Bf16> d_y2(count);
    f.y = rows_of(d_y2.get(), n);
    rmsnorm::forward(f, cu_stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cudaStreamDestroy(stream);

    char kernels[64];
    rmsnorm::check(rmsnorm_gpu_kernels(kernels, sizeof kernels));
    const double e_s = max_ulps(d_res.to_host(), ref_s), e_y = max_ulps(d_y.to_host(), ref_y),
                 e_y2 = max_ulps(d_y2.to_host(), ref_y),
                 e_dx = max_normwise(d_dx.to_host(), ref_dx),
                 e_dw = max_normwise(d_dw.to_host(), ref_dw);
    std::printf(
        "librmsnorm on the GPU (%s), %lld x %lld bf16, from the CPU reference: sum, y, "
        "plain y %.0f, %.0f, %.0f bf16 ulps; dx, dw %.2f, %.2f of 2^-8 x max|ref|\n",
        kernels, static_cast<long long>(rows), static_cast<long long>(n), e_s, e_y, e_y2, e_dx,
        e_dw);
    // The sum is exact; the rest differ only by the order of fp32 sums (y: rstd's last bit
    // can move x * r across a rounding boundary, then the weight's product across another;
    // dx, dw: one bf16 rounding apart, and a bf16 ulp is up to 2^-7 of the largest value).
    const bool ok = e_s == 0 && e_y <= 2 && e_y2 <= 2 && e_dx <= 2 && e_dw <= 2;
    std::printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
