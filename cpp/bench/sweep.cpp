#include "sweep.hpp"

#include "cuda_check.hpp"
#include "workload.hpp"

namespace rmsnorm_bench {
namespace {

double gbps_of(uint64_t bytes, double ms) { return static_cast<double>(bytes) / ms / 1e6; }

// The ceiling: a device-to-device copy moving `bytes` in all, half read and half written,
// as the Python bench's dst.copy_(src). Its buffers live only while it is timed, so that the
// op's tensors have the memory after it.
double copy_gbps(uint64_t bytes, const Timer& timer) {
    const size_t half = static_cast<size_t>(bytes / 2);
    const DeviceBuffer src(half), dst(half);
    cuda_check(cudaMemsetAsync(src.get(), 0, half, timer.stream()),
               "cudaMemsetAsync (copy source)");
    const double ms = timer.median_ms([&] {
        cuda_check(
            cudaMemcpyAsync(dst.get(), src.get(), half, cudaMemcpyDeviceToDevice, timer.stream()),
            "cudaMemcpyAsync (copy ceiling)");
    });
    return gbps_of(bytes, ms);
}

std::vector<Shape> shapes_of(const Options& options) {
    return options.shapes.empty() ? default_shapes() : options.shapes;
}

std::vector<Op> ops_of(const Options& options) {
    return options.ops.empty() ? std::vector<Op>{Op::kForward, Op::kAdd} : options.ops;
}

}  // namespace

Row measure_row(Op op, rmsnorm_dtype dtype, Shape shape, rmsnorm_casting_mode mode,
                const Timer& timer) {
    Row row{};
    row.op = op;
    row.dtype = dtype;
    row.shape = shape;
    row.bytes = moved_bytes(op, dtype, shape);
    row.copy_gbps = copy_gbps(row.bytes, timer);

    const Workload work(op, dtype, shape, mode, timer.stream());
    const double ms = timer.median_ms([&] { work.run(); });
    row.us = ms * 1e3;
    row.gbps = gbps_of(row.bytes, ms);
    row.pct_copy = 100 * row.gbps / row.copy_gbps;
    if (op == Op::kBackward) {
        row.no_dw_us = timer.median_ms([&] { work.run_without_dw(); }) * 1e3;
    }
    return row;
}

std::vector<Row> run_sweep(const Options& options, const Timer& timer,
                           const std::function<void(const std::vector<Row>&)>& on_row) {
    std::vector<Row> rows;
    for (Op op : ops_of(options)) {
        for (rmsnorm_dtype dtype : options.dtypes) {
            for (Shape shape : shapes_of(options)) {
                rows.push_back(measure_row(op, dtype, shape, options.casting_mode, timer));
                on_row(rows);
            }
        }
    }
    return rows;
}

}  // namespace rmsnorm_bench
