#include "kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "errors.hpp"

namespace rmsnorm::detail {
namespace {

constexpr int kMaxDevices = 64;

std::string arch_name(int arch) { return "sm_" + std::to_string(arch); }

std::string built_archs() {
    std::string out;
    for (size_t i = 0; i < kImageSetCount; ++i) {
        if (!out.empty()) out += ", ";
        out += arch_name(kImageSets[i].arch) + (kImageSets[i].is_ptx ? " PTX" : "");
    }
    return out.empty() ? "none" : out;
}

// Triton builds sm_90 and newer as "a" targets (sm_90a), which run on that arch only; the
// sm_8x cubins run on any later minor of their major, and their PTX on any later arch.
const ImageSet* image_set_for(int arch) {
    const ImageSet* best = nullptr;
    for (size_t i = 0; i < kImageSetCount; ++i) {
        const ImageSet& s = kImageSets[i];
        if (!s.is_ptx && s.arch == arch) return &s;
    }
    for (size_t i = 0; i < kImageSetCount; ++i) {
        const ImageSet& s = kImageSets[i];
        if (!s.is_ptx && s.arch < 90 && s.arch / 10 == arch / 10 && s.arch < arch &&
            (best == nullptr || s.arch > best->arch)) {
            best = &s;
        }
    }
    if (best != nullptr) return best;
    for (size_t i = 0; i < kImageSetCount; ++i) {
        const ImageSet& s = kImageSets[i];
        if (s.is_ptx && s.arch <= arch) return &s;
    }
    return nullptr;
}

struct DeviceSlot {
    std::once_flag once;
    DeviceInfo info;
    rmsnorm_status status = RMSNORM_SUCCESS;
    std::string error;
};

void probe(const Driver& d, CUdevice device, DeviceSlot& slot) {
    int major = 0, minor = 0;
    CUresult r = d.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    if (r == CUDA_SUCCESS)
        r = d.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    DeviceInfo& info = slot.info;
    if (r == CUDA_SUCCESS)
        r = d.DeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    if (r == CUDA_SUCCESS)
        r = d.DeviceGetAttribute(&info.shared_optin,
                                 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
    if (r != CUDA_SUCCESS) {
        slot.status = cuda_failure(d, r, "cuDeviceGetAttribute");
        slot.error = rmsnorm_last_error();
        return;
    }
    info.device = device;
    info.arch = major * 10 + minor;
    info.set = image_set_for(info.arch);
    if (info.set == nullptr) {
        slot.status = RMSNORM_ERROR_UNSUPPORTED;
        slot.error = "rmsnorm: no kernels of this build run on " + arch_name(info.arch) +
                     " (built: " + built_archs() +
                     "); rebuild with it in RMSNORM_CUDA_ARCHS, or sm_80 for its PTX";
    }
}

// Loaded kernels, one slot per image of every set; never unloaded (the driver frees them at
// process exit, when unloading could race its teardown).
struct Slot {
    std::atomic<CUkernel> handle{nullptr};
    std::atomic<uint64_t> ready_on{0};  // bit d: shared memory attribute set on device d
};

struct Registry {
    std::vector<std::unique_ptr<Slot[]>> slots;
    std::mutex mutex;
    Registry() {
        for (size_t i = 0; i < kImageSetCount; ++i) {
            slots.push_back(std::make_unique<Slot[]>(kImageSets[i].count));
        }
    }
};

Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

rmsnorm_status current_device(const Driver& d, const DeviceInfo** info) {
    CUcontext ctx = nullptr;
    CUresult r = d.CtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS) return cuda_failure(d, r, "cuCtxGetCurrent");
    if (ctx == nullptr) {
        return fail(RMSNORM_ERROR_NO_GPU,
                    "rmsnorm: no current CUDA context on this thread; make one current "
                    "(cudaSetDevice, cuCtxSetCurrent) before calling");
    }
    CUdevice device = 0;
    if ((r = d.CtxGetDevice(&device)) != CUDA_SUCCESS) return cuda_failure(d, r, "cuCtxGetDevice");
    if (device < 0 || device >= kMaxDevices) {
        return fail(RMSNORM_ERROR_UNSUPPORTED, "rmsnorm: device ordinal " + std::to_string(device) +
                                                   " is beyond the " + std::to_string(kMaxDevices) +
                                                   " supported");
    }
    static std::array<DeviceSlot, kMaxDevices> devices;
    DeviceSlot& slot = devices[device];
    std::call_once(slot.once, probe, d, device, slot);
    if (slot.status != RMSNORM_SUCCESS) return fail(slot.status, slot.error);
    *info = &slot.info;
    return RMSNORM_SUCCESS;
}

const KernelImage* find_image(const DeviceInfo& dev, const KernelKey& key) {
    const ImageSet& set = *dev.set;
    const uint32_t packed = key.packed();
    const KernelImage* end = set.kernels + set.count;
    const KernelImage* it = std::lower_bound(
        set.kernels, end, packed, [](const KernelImage& k, uint32_t v) { return k.key < v; });
    if (it == end || it->key != packed) {
        fail(RMSNORM_ERROR_UNSUPPORTED, "rmsnorm: no kernel for this combination in the " +
                                            arch_name(set.arch) + " set (key " +
                                            std::to_string(packed) +
                                            "); the build and rmsnorm/aot/build.py disagree");
        return nullptr;
    }
    return it;
}

rmsnorm_status find_kernel(const Driver& d, const DeviceInfo& dev, const KernelKey& key,
                           Kernel* kernel) {
    const KernelImage* image = find_image(dev, key);
    if (image == nullptr) return RMSNORM_ERROR_UNSUPPORTED;
    if (image->shared > dev.shared_optin) {
        return fail(RMSNORM_ERROR_UNSUPPORTED,
                    "rmsnorm: the " + arch_name(dev.set->arch) + " kernel needs " +
                        std::to_string(image->shared) + " bytes of shared memory; " +
                        arch_name(dev.arch) + " allows " + std::to_string(dev.shared_optin) +
                        ": rebuild with " + arch_name(dev.arch) + " in RMSNORM_CUDA_ARCHS");
    }
    Registry& reg = registry();
    const size_t set_index = static_cast<size_t>(dev.set - kImageSets);
    Slot& slot = reg.slots[set_index][static_cast<size_t>(image - dev.set->kernels)];
    const uint64_t bit = uint64_t{1} << dev.device;
    CUkernel handle = slot.handle.load(std::memory_order_acquire);
    if (handle == nullptr || !(slot.ready_on.load(std::memory_order_acquire) & bit)) {
        std::lock_guard<std::mutex> lock(reg.mutex);
        handle = slot.handle.load(std::memory_order_relaxed);
        if (handle == nullptr) {
            CUlibrary library = nullptr;
            CUresult r = d.LibraryLoadData(&library, dev.set->blob + image->offset, nullptr,
                                           nullptr, 0, nullptr, nullptr, 0);
            if (r != CUDA_SUCCESS) return cuda_failure(d, r, "cuLibraryLoadData");
            if ((r = d.LibraryGetKernel(&handle, library, image->name)) != CUDA_SUCCESS)
                return cuda_failure(d, r, std::string("cuLibraryGetKernel(") + image->name + ")");
            slot.handle.store(handle, std::memory_order_release);
        }
        if (!(slot.ready_on.load(std::memory_order_relaxed) & bit)) {
            CUresult r = d.KernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                              image->shared, handle, dev.device);
            if (r != CUDA_SUCCESS) return cuda_failure(d, r, "cuKernelSetAttribute");
            slot.ready_on.fetch_or(bit, std::memory_order_release);
        }
    }
    kernel->image = image;
    kernel->handle = handle;
    return RMSNORM_SUCCESS;
}

}  // namespace rmsnorm::detail
