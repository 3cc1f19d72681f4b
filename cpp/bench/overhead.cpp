#include "overhead.hpp"

#include <algorithm>
#include <chrono>

#include "cuda_check.hpp"
#include "workload.hpp"

namespace rmsnorm_bench {
namespace {

constexpr int kWarmupCalls = 20;  // the Python bench's: kernels loaded, caches warm
constexpr Shape kDecodeShape{1, 4096};

}  // namespace

OverheadRow measure_overhead(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                             cudaStream_t stream, int calls, int sync_every) {
    const Workload work(op, dtype, shape, mode, stream);
    for (int i = 0; i < kWarmupCalls; ++i) work.run();
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    using Clock = std::chrono::steady_clock;
    Clock::duration launching{};
    for (int done = 0; done < calls;) {
        const int group = std::min(sync_every, calls - done);
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < group; ++i) work.run();
        launching += Clock::now() - t0;
        done += group;
        cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    const double us = std::chrono::duration<double, std::micro>(launching).count();
    return OverheadRow{op, dtype, shape, calls, sync_every, us / calls};
}

std::vector<OverheadRow> run_overhead(const Options& options, cudaStream_t stream) {
    const std::vector<Op> ops =
        options.ops.empty() ? std::vector<Op>{Op::kForward, Op::kAdd, Op::kBackward} : options.ops;
    const std::vector<Shape> shapes =
        options.shapes.empty() ? std::vector<Shape>{kDecodeShape} : options.shapes;
    std::vector<OverheadRow> rows;
    for (Op op : ops)
        for (rmsnorm_dtype dtype : options.dtypes)
            for (Shape shape : shapes)
                rows.push_back(measure_overhead(op, dtype, shape, options.casting_mode, stream,
                                                options.calls, options.sync_every));
    return rows;
}

}  // namespace rmsnorm_bench
