// The compiled kernels at run time: which image set serves a device, and each kernel loaded
// once per process (cuLibraryLoadData: context-independent), thread-safely, with its
// dynamic shared memory allowed on each device it runs on.
#pragma once

#include <cuda.h>

#include "driver.hpp"
#include "kernel_table.hpp"

namespace rmsnorm::detail {

struct DeviceInfo {
    CUdevice device = 0;
    int arch = 0;  // major * 10 + minor
    int sm_count = 0;
    int shared_optin = 0;           // max dynamic shared memory per block, bytes
    const ImageSet* set = nullptr;  // the kernels that run on it
};

// The device of the calling thread's current context.
rmsnorm_status current_device(const Driver& d, const DeviceInfo** info);

struct Kernel {
    const KernelImage* image;
    CUkernel handle;
};

// The kernel for key on dev, loaded and ready to launch there.
rmsnorm_status find_kernel(const Driver& d, const DeviceInfo& dev, const KernelKey& key,
                           Kernel* kernel);

// The image of key in dev's set (no loading): launch parameters such as rows and
// programs_per_sm, or nullptr with the last error set.
const KernelImage* find_image(const DeviceInfo& dev, const KernelKey& key);

}  // namespace rmsnorm::detail
