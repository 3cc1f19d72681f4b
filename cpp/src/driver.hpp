// The CUDA driver, loaded at run time (dlopen "libcuda.so.1"): librmsnorm links and loads on
// machines with no driver and reports RMSNORM_ERROR_NO_GPU there.
#pragma once

#include <cuda.h>

#include <string>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm::detail {

struct Driver {
    decltype(&::cuGetErrorName) GetErrorName = nullptr;
    decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
    decltype(&::cuCtxGetDevice) CtxGetDevice = nullptr;
    decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
    decltype(&::cuLibraryLoadData) LibraryLoadData = nullptr;
    decltype(&::cuLibraryGetKernel) LibraryGetKernel = nullptr;
    decltype(&::cuKernelSetAttribute) KernelSetAttribute = nullptr;
    decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
    decltype(&::cuLaunchKernelEx) LaunchKernelEx = nullptr;
    decltype(&::cuMemsetD8Async) MemsetD8Async = nullptr;
};

// The loaded driver, or nullptr with the thread's last error set (status in *status).
const Driver* driver(rmsnorm_status* status);

// Records a failed driver call as the last error: "what: CUDA_ERROR_...".
rmsnorm_status cuda_failure(const Driver& d, CUresult result, const std::string& what);

}  // namespace rmsnorm::detail
