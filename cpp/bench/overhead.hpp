// Host time per call: what a caller waits for when the GPU work is smaller than the launch
// cost (decode), i.e. librmsnorm's validation, kernel choice and cuLaunchKernel.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "cli.hpp"
#include "results.hpp"

namespace rmsnorm_bench {

// `calls` calls of op at shape, timed on the host with std::chrono, a stream sync every
// sync_every calls and outside the timed spans: the launch queue never fills, so a call
// never waits for a free slot and the figure is the host's cost alone.
OverheadRow measure_overhead(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                             cudaStream_t stream, int calls, int sync_every);

// Every op x dtype x shape of the options (defaults: fwd add bwd, 1x4096).
std::vector<OverheadRow> run_overhead(const Options& options, cudaStream_t stream);

}  // namespace rmsnorm_bench
