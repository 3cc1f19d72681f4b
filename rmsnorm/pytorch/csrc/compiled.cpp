#include "compiled.hpp"

#include <atomic>

namespace rmsnorm_torch {
namespace {
std::atomic<bool> enabled{true};
}  // namespace

bool compiled_enabled() { return enabled.load(std::memory_order_relaxed); }

bool set_compiled_enabled(bool value) { return enabled.exchange(value); }

}  // namespace rmsnorm_torch
