// Owners of CUDA runtime objects (device memory, a stream, events): released when they go
// out of scope, including on the exception paths that end a failed run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

namespace rmsnorm_bench {

namespace detail {
struct FreeDevice {
    void operator()(void* p) const noexcept { cudaFree(p); }
};
struct DestroyStream {
    void operator()(cudaStream_t s) const noexcept { cudaStreamDestroy(s); }
};
struct DestroyEvent {
    void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
};
}  // namespace detail

// cudaMalloc'd bytes (256-byte aligned, which the vectorised kernels' 16 bytes need). Zero
// bytes allocate nothing and give a null pointer.
class DeviceBuffer {
 public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);

    void* get() const noexcept { return ptr_.get(); }
    template <typename T>
    T* as() const noexcept {
        return static_cast<T*>(ptr_.get());
    }
    size_t bytes() const noexcept { return bytes_; }

 private:
    std::unique_ptr<void, detail::FreeDevice> ptr_;
    size_t bytes_ = 0;
};

// A stream that synchronizes with the legacy default stream (plain cudaStreamCreate), so
// that synchronous setup copies are ordered before the timed work without extra syncs.
class Stream {
 public:
    Stream();
    cudaStream_t get() const noexcept { return handle_.get(); }
    void synchronize() const;

 private:
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, detail::DestroyStream> handle_;
};

// A timing event.
class Event {
 public:
    Event();
    cudaEvent_t get() const noexcept { return handle_.get(); }
    void record(cudaStream_t stream) const;
    void synchronize() const;
    // Milliseconds from start to this event, both recorded and complete.
    float ms_since(const Event& start) const;

 private:
    std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, detail::DestroyEvent> handle_;
};

}  // namespace rmsnorm_bench
