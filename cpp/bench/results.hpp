// What a run measured, in the Python bench's terms (its JSON rows), for the table and the
// JSON writer.
#pragma once

#include <cstdint>
#include <optional>

#include "problem.hpp"

namespace rmsnorm_bench {

// The name this benchmark's figures go under, beside the Python bench's impls ("rmsnorm",
// "torch_eager", ...) when rows of both are put side by side.
inline constexpr const char* kImplName = "librmsnorm (C)";

struct Row {
    Op op;
    rmsnorm_dtype dtype;
    Shape shape;
    uint64_t bytes;    // moved_bytes(): what GB/s is of
    double copy_gbps;  // the ceiling: a same-bytes device copy
    double us;         // the op's median
    double gbps;
    double pct_copy;
    std::optional<double> no_dw_us;  // bwd: the backward without dw
};

struct OverheadRow {
    Op op;
    rmsnorm_dtype dtype;
    Shape shape;
    int calls;
    int sync_every;
    double host_us_per_call;
    // GPU time per call of `chain_calls` calls replayed as one CUDA graph (decode engines run
    // so): each kernel's start waits on the one before, plainly or by programmatic dependent
    // launch (RMSNORM_LAUNCH_PDL), which overlaps a kernel's launch with its predecessor's end.
    int chain_calls;
    double graph_us_per_call;
    double graph_pdl_us_per_call;
};

}  // namespace rmsnorm_bench
