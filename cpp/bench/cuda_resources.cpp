#include "cuda_resources.hpp"

#include <string>

#include "cuda_check.hpp"

namespace rmsnorm_bench {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    const cudaError_t code = cudaMalloc(&p, bytes);
    if (code != cudaSuccess) {
        throw CudaError(code, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    }
    ptr_.reset(p);
}

Stream::Stream() {
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreate(&s), "cudaStreamCreate");
    handle_.reset(s);
}

void Stream::synchronize() const {
    cuda_check(cudaStreamSynchronize(get()), "cudaStreamSynchronize");
}

Event::Event() {
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    handle_.reset(e);
}

void Event::record(cudaStream_t stream) const {
    cuda_check(cudaEventRecord(get(), stream), "cudaEventRecord");
}

void Event::synchronize() const { cuda_check(cudaEventSynchronize(get()), "cudaEventSynchronize"); }

float Event::ms_since(const Event& start) const {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start.get(), get()), "cudaEventElapsedTime");
    return ms;
}

}  // namespace rmsnorm_bench
