// The thread-local last error behind rmsnorm_last_error().
#pragma once

#include <string>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm::detail {

// Records `message` as the calling thread's last error and returns `status`.
rmsnorm_status fail(rmsnorm_status status, std::string message);

// fail() with RMSNORM_ERROR_INVALID_ARGUMENT and the message prefixed with "rmsnorm: ".
rmsnorm_status invalid(const std::string& message);

// Clears the last error and returns RMSNORM_SUCCESS.
rmsnorm_status succeed();

}  // namespace rmsnorm::detail
