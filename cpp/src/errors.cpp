#include "errors.hpp"

#include <utility>

namespace rmsnorm::detail {
namespace {
thread_local std::string last_error;
}

rmsnorm_status fail(rmsnorm_status status, std::string message) {
    last_error = std::move(message);
    return status;
}

rmsnorm_status invalid(const std::string& message) {
    return fail(RMSNORM_ERROR_INVALID_ARGUMENT, "rmsnorm: " + message);
}

rmsnorm_status succeed() {
    last_error.clear();
    return RMSNORM_SUCCESS;
}

}  // namespace rmsnorm::detail

extern "C" {

const char* rmsnorm_status_string(rmsnorm_status status) {
    switch (status) {
        case RMSNORM_SUCCESS:
            return "success";
        case RMSNORM_ERROR_INVALID_ARGUMENT:
            return "invalid argument";
        case RMSNORM_ERROR_NOT_IMPLEMENTED:
            return "not implemented";
        case RMSNORM_ERROR_NO_GPU:
            return "no GPU";
        case RMSNORM_ERROR_CUDA:
            return "CUDA error";
        case RMSNORM_ERROR_UNSUPPORTED:
            return "unsupported";
    }
    return "unknown status";
}

const char* rmsnorm_last_error(void) { return rmsnorm::detail::last_error.c_str(); }

}  // extern "C"
