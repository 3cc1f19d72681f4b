// The results as JSON in the structure python -m rmsnorm_tools.bench --json writes:
//   {"device": ..., "rows": [{"op", "dtype", "M", "N", "bytes", "copy_gbps",
//                             "impls": {name: {"us", "gbps", "pct_copy"}}, ...}]}
// with this benchmark's figures under the impl name "librmsnorm (C)", so that rows of both
// files merge by (op, dtype, M, N) and their "impls" sit side by side.
#pragma once

#include <string>
#include <vector>

#include "device.hpp"
#include "results.hpp"

namespace rmsnorm_bench {

struct RunInfo {
    DeviceInfo device;
    rmsnorm_casting_mode casting_mode;
};

// Writes the whole file anew (PATH.tmp, then renamed over PATH, so that a run killed while
// writing leaves the previous complete file). Throws std::runtime_error if it cannot.
void write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                const std::vector<OverheadRow>& overhead);

}  // namespace rmsnorm_bench
