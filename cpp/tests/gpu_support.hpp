// What the GPU tests share: the CUDA runtime's calls checked, device memory and a stream owned,
// and the fixture that skips where there is no GPU (RMSNORM_REQUIRE_GPU=1 makes that a failure).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_test {

// ---------------------------------------------------------------------------------------------
// The CUDA runtime: a failed call throws (GoogleTest reports the exception as a failure).

inline void cuda_check(cudaError_t status, const char* call) {
    if (status != cudaSuccess) {
        throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                                 cudaGetErrorString(status) + ")");
    }
}
#define CUDA_CHECK(call) ::rmsnorm_test::cuda_check((call), #call)

// How many GPUs the CUDA runtime sees: 0 when it reports an error (no driver, a driver older
// than the runtime) or no device, with the reason in *why.
inline int gpu_count(std::string* why) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: clear it
        *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ", " +
               cudaGetErrorString(status);
        return 0;
    }
    if (count == 0) *why = "cudaGetDeviceCount: 0 devices";
    return count;
}

inline bool gpu_required() {
    const char* v = std::getenv("RMSNORM_REQUIRE_GPU");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Device memory of the current device, freed with it.
class DeviceBuffer {
 public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            if (ptr_ != nullptr) cudaFree(ptr_);
            ptr_ = std::exchange(other.ptr_, nullptr);
            bytes_ = std::exchange(other.bytes_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    unsigned char* bytes_at(size_t offset) const {
        return static_cast<unsigned char*>(ptr_) + offset;
    }
    size_t size() const { return bytes_; }

 private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A stream of the test's own, non-blocking: results are right only if the library launches on
// the stream it is given (it cannot lean on the legacy default stream's implicit ordering).
class Stream {
 public:
    Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    ~Stream() { cudaStreamDestroy(stream_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    cudaStream_t get() const { return stream_; }
    // The library's handle: cudaStream_t and CUstream name the same type.
    CUstream cu() const { return reinterpret_cast<CUstream>(stream_); }

 private:
    cudaStream_t stream_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// The fixture: a GPU, device 0's primary context current (the library uses the calling
// thread's current context), a stream.

class GpuTest : public ::testing::Test {
 protected:
    void SetUp() override {
        std::string why;
        if (gpu_count(&why) == 0) {
            if (gpu_required()) FAIL() << "no GPU (" << why << ") and RMSNORM_REQUIRE_GPU is set";
            GTEST_SKIP() << "no GPU (" << why << ")";
        }
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
        ASSERT_EQ(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
        stream_ = std::make_unique<Stream>();
    }

    bool ready() const { return stream_ != nullptr; }  // SetUp found a GPU and got through
    const Stream& stream() const { return *stream_; }
    int sms() const { return sms_; }

 private:
    std::unique_ptr<Stream> stream_;
    int sms_ = 0;
};

}  // namespace rmsnorm_test
