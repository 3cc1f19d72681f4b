#include "overhead.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <type_traits>

#include "cuda_check.hpp"
#include "cuda_resources.hpp"
#include "workload.hpp"

namespace rmsnorm_bench {
namespace {

constexpr int kWarmupCalls = 20;  // the Python bench's: kernels loaded, caches warm
constexpr Shape kDecodeShape{1, 4096};
constexpr int kChainCalls = 100;  // calls per graph
constexpr int kGraphReplays = 20;

struct DestroyGraph {
    void operator()(cudaGraph_t g) const noexcept { cudaGraphDestroy(g); }
};
struct DestroyGraphExec {
    void operator()(cudaGraphExec_t g) const noexcept { cudaGraphExecDestroy(g); }
};

// GPU microseconds per call of kChainCalls calls captured in one graph, launched with flags.
double graph_us_per_call(Workload& work, unsigned flags, cudaStream_t stream) {
    work.set_launch_flags(flags);
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    for (int i = 0; i < kChainCalls; ++i) work.run();
    cudaGraph_t raw = nullptr;
    cuda_check(cudaStreamEndCapture(stream, &raw), "cudaStreamEndCapture");
    const std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, DestroyGraph> graph(raw);
    cudaGraphExec_t raw_exec = nullptr;
    cuda_check(cudaGraphInstantiate(&raw_exec, graph.get(), 0), "cudaGraphInstantiate");
    const std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, DestroyGraphExec> exec(raw_exec);
    cuda_check(cudaGraphLaunch(exec.get(), stream), "cudaGraphLaunch");  // warm-up
    const Event start, end;
    start.record(stream);
    for (int i = 0; i < kGraphReplays; ++i)
        cuda_check(cudaGraphLaunch(exec.get(), stream), "cudaGraphLaunch");
    end.record(stream);
    end.synchronize();
    work.set_launch_flags(0);
    return 1000.0 * end.ms_since(start) / (kGraphReplays * kChainCalls);
}

}  // namespace

OverheadRow measure_overhead(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                             cudaStream_t stream, int calls, int sync_every) {
    Workload work(op, dtype, shape, mode, stream);
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
    const double graph = graph_us_per_call(work, 0, stream);
    const double graph_pdl = graph_us_per_call(work, RMSNORM_LAUNCH_PDL, stream);
    return OverheadRow{op,         dtype,       shape, calls,    sync_every,
                       us / calls, kChainCalls, graph, graph_pdl};
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
