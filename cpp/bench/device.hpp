// The GPU the run measures: chosen and made current for librmsnorm, and described for the
// report.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace rmsnorm_bench {

// No usable GPU (no driver, no device, or none librmsnorm can use): main exits with status 2,
// which scripts can tell from a failed measurement.
class NoGpu : public std::runtime_error {
 public:
    using std::runtime_error::runtime_error;
};

struct DeviceInfo {
    int index = 0;
    std::string name;          // as torch.cuda.get_device_name() reports it
    std::string kernels;       // rmsnorm_gpu_kernels(): which compiled kernels serve it
    std::string cuda_runtime;  // "13.0"
    std::string cuda_driver;
    size_t l2_bytes = 0;
};

// Makes device `index`'s primary context current on this thread: librmsnorm launches in the
// caller's current context and has none of its own. Throws NoGpu, CudaError or rmsnorm::Error.
DeviceInfo open_device(int index);

}  // namespace rmsnorm_bench
