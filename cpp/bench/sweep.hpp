// The throughput sweep: every op x dtype x shape asked for, each against its copy ceiling.
#pragma once

#include <functional>
#include <vector>

#include "cli.hpp"
#include "results.hpp"
#include "timing.hpp"

namespace rmsnorm_bench {

// One row: the copy ceiling, then the op (and for bwd the op without dw), timed by timer.
Row measure_row(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                const Timer& timer);

// Every row of the options, in the Python bench's order (op, then dtype, then shape);
// on_row sees each as it is done (progress, JSON rewritten).
std::vector<Row> run_sweep(const Options& options, const Timer& timer,
                           const std::function<void(const std::vector<Row>&)>& on_row);

}  // namespace rmsnorm_bench
