#include "device.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "cuda_check.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace rmsnorm_bench {
namespace {

std::string version_text(int version) {  // CUDA's 1000 * major + 10 * minor
    return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Why there is no GPU: the runtime's word, and librmsnorm's, whose own driver loading names
// what is missing (with no driver at all the runtime only says its driver is "insufficient").
std::string no_gpu_reason(cudaError_t code) {
    std::string why = "cudaGetDeviceCount: ";
    why += code != cudaSuccess
               ? std::string(cudaGetErrorName(code)) + ", " + cudaGetErrorString(code)
               : std::string("0 devices");
    char unused[64];
    if (rmsnorm_gpu_kernels(unused, sizeof unused) == RMSNORM_ERROR_NO_GPU) {
        why += "; ";
        why += rmsnorm_last_error();
    }
    return why;
}

}  // namespace

DeviceInfo open_device(int index) {
    int count = 0;
    const cudaError_t code = cudaGetDeviceCount(&count);
    // With no driver the runtime answers cudaErrorInsufficientDriver, with no device
    // cudaErrorNoDevice; either way there is nothing to time.
    if (code != cudaSuccess || count == 0) {
        throw NoGpu(
            "no CUDA GPU, nothing to measure: rmsnorm-cpp-bench times librmsnorm's kernels "
            "on a GPU (" +
            no_gpu_reason(code) + ")");
    }
    if (index >= count) {
        throw NoGpu("--device " + std::to_string(index) + ": there are only " +
                    std::to_string(count) + " CUDA devices");
    }
    DeviceInfo info;
    info.index = index;
    cuda_check(cudaSetDevice(index), "cudaSetDevice");
    // librmsnorm launches in the thread's current context and creates none: cudaFree(nullptr)
    // makes the device's primary context current now (cudaSetDevice alone did not before
    // CUDA 12), rather than at the first runtime call that happens to need it.
    cuda_check(cudaFree(nullptr), "cudaFree(nullptr) (context creation)");

    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    info.name = prop.name;
    info.l2_bytes = prop.l2CacheSize > 0 ? static_cast<size_t>(prop.l2CacheSize) : 0;

    int runtime = 0, driver = 0;
    cuda_check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    cuda_check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    info.cuda_runtime = version_text(runtime);
    info.cuda_driver = version_text(driver);

    char kernels[128] = {};
    const rmsnorm_status status = rmsnorm_gpu_kernels(kernels, sizeof kernels);
    if (status == RMSNORM_ERROR_NO_GPU) {
        // The runtime sees the GPU but librmsnorm's own driver loading does not (e.g. a
        // driver older than it needs): still no GPU as far as this benchmark goes.
        throw NoGpu(std::string("librmsnorm sees no usable GPU: ") + rmsnorm_last_error());
    }
    rmsnorm::check(status);
    info.kernels = kernels;
    return info;
}

}  // namespace rmsnorm_bench
