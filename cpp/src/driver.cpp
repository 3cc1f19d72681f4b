#include "driver.hpp"

#include <dlfcn.h>

#include "errors.hpp"

namespace rmsnorm::detail {
namespace {

struct Loaded {
    Driver driver;
    rmsnorm_status status = RMSNORM_SUCCESS;
    std::string error;
};

template <typename F>
bool resolve(void* handle, const char* name, F& fn, std::string& error) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    if (fn == nullptr && error.empty()) {
        error = std::string("the CUDA driver lacks ") + name +
                " (librmsnorm needs a CUDA 12.0 or newer driver)";
    }
    return fn != nullptr;
}

Loaded load() {
    Loaded l;
    // Never closed: the driver stays loaded for the life of the process.
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        l.status = RMSNORM_ERROR_NO_GPU;
        const char* why = dlerror();
        l.error = std::string("no CUDA driver: dlopen(\"libcuda.so.1\") failed") +
                  (why ? std::string(": ") + why : std::string());
        return l;
    }
    Driver& d = l.driver;
    decltype(&::cuInit) init = nullptr;
    // Plain (legacy default stream) entry points, as cuda.h declares them without
    // CUDA_API_PER_THREAD_DEFAULT_STREAM.
    bool ok = resolve(handle, "cuInit", init, l.error) &
              resolve(handle, "cuGetErrorName", d.GetErrorName, l.error) &
              resolve(handle, "cuCtxGetCurrent", d.CtxGetCurrent, l.error) &
              resolve(handle, "cuCtxGetDevice", d.CtxGetDevice, l.error) &
              resolve(handle, "cuDeviceGetAttribute", d.DeviceGetAttribute, l.error) &
              resolve(handle, "cuLibraryLoadData", d.LibraryLoadData, l.error) &
              resolve(handle, "cuLibraryGetKernel", d.LibraryGetKernel, l.error) &
              resolve(handle, "cuKernelSetAttribute", d.KernelSetAttribute, l.error) &
              resolve(handle, "cuLaunchKernel", d.LaunchKernel, l.error) &
              resolve(handle, "cuLaunchKernelEx", d.LaunchKernelEx, l.error) &
              resolve(handle, "cuMemsetD8Async", d.MemsetD8Async, l.error);
    if (!ok) {
        l.status = RMSNORM_ERROR_NO_GPU;
        return l;
    }
    const CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        d.GetErrorName(r, &name);
        l.status = RMSNORM_ERROR_NO_GPU;
        l.error =
            std::string("cuInit failed: ") + (name ? name : "unknown error") + " (no usable GPU)";
    }
    return l;
}

}  // namespace

const Driver* driver(rmsnorm_status* status) {
    static const Loaded loaded = load();  // thread-safe, once
    if (loaded.status != RMSNORM_SUCCESS) {
        *status = fail(loaded.status, "rmsnorm: " + loaded.error);
        return nullptr;
    }
    return &loaded.driver;
}

rmsnorm_status cuda_failure(const Driver& d, CUresult result, const std::string& what) {
    const char* name = nullptr;
    if (d.GetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown";
    return fail(RMSNORM_ERROR_CUDA, "rmsnorm: " + what + " failed: " + name);
}

}  // namespace rmsnorm::detail
