// Device tensors filled with normally distributed values, like the Python bench's randn
// inputs: the timing does not depend on the values, but inf, NaN or denormals could.
#pragma once

#include <cstdint>

#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_bench {

// Fills count elements of dtype at device pointer dst with mean + stddev * N(0, 1) values
// from seed. One block of values is generated and repeated over the tensor: generating
// gigabytes on the host would take longer than the measurement, and a repeating pattern
// changes nothing a memory-bound kernel does.
void fill_normal(void* dst, int64_t count, rmsnorm_dtype dtype, uint64_t seed, float mean = 0,
                 float stddev = 1);

}  // namespace rmsnorm_bench
