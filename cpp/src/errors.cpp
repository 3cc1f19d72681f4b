#include "errors.hpp"

#include <type_traits>
#include <utility>

#include "enum_value.hpp"

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
    // A C caller may pass any int: read it as one (enum_value.hpp).
    using Value = std::underlying_type_t<rmsnorm_status>;
    switch (rmsnorm::detail::enum_value(status)) {
        case Value{RMSNORM_SUCCESS}:
            return "success";
        case Value{RMSNORM_ERROR_INVALID_ARGUMENT}:
            return "invalid argument";
        case Value{RMSNORM_ERROR_NOT_IMPLEMENTED}:
            return "not implemented";
        case Value{RMSNORM_ERROR_NO_GPU}:
            return "no GPU";
        case Value{RMSNORM_ERROR_CUDA}:
            return "CUDA error";
        case Value{RMSNORM_ERROR_UNSUPPORTED}:
            return "unsupported";
    }
    return "unknown status";
}

const char* rmsnorm_last_error(void) { return rmsnorm::detail::last_error.c_str(); }

}  // extern "C"
