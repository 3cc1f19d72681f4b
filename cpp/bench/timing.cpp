#include "timing.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda_check.hpp"

namespace rmsnorm_bench {
namespace {

constexpr size_t kMinFlushBytes = size_t{256} << 20;  // do_bench's cache buffer

// statistics.median: the middle value, or the mean of the two middle ones.
double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t k = values.size() / 2;
    return values.size() % 2 == 1 ? values[k] : (values[k - 1] + values[k]) / 2;
}

}  // namespace

Timer::Timer(cudaStream_t stream, size_t l2_bytes, TimingSettings settings)
    : stream_(stream), flush_buffer_(std::max(kMinFlushBytes, 4 * l2_bytes)), settings_(settings) {}

void Timer::flush_l2() const {
    // Writing a buffer several times L2's size evicts whatever the previous call left there,
    // so every repeat reads its inputs from HBM as a cold call in a model would.
    cuda_check(cudaMemsetAsync(flush_buffer_.get(), 0, flush_buffer_.bytes(), stream_),
               "cudaMemsetAsync (L2 flush)");
}

double Timer::median_ms(const std::function<void()>& fn) const {
    fn();  // first call: loads the kernel, and fails early on bad arguments
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");

    // The estimate includes the flushes, as do_bench's does: that is what sets the counts.
    const Event start, end;
    start.record(stream_);
    for (int i = 0; i < 5; ++i) {
        flush_l2();
        fn();
    }
    end.record(stream_);
    end.synchronize();
    const double estimate_ms = std::max(1e-6, end.ms_since(start) / 5.0);
    const int warmups = std::max(1, static_cast<int>(settings_.warmup_ms / estimate_ms));
    const int repeats = std::max(1, static_cast<int>(settings_.rep_ms / estimate_ms));

    const std::vector<Event> starts(repeats), ends(repeats);
    for (int i = 0; i < warmups; ++i) fn();
    for (int i = 0; i < repeats; ++i) {
        flush_l2();
        starts[i].record(stream_);
        fn();
        ends[i].record(stream_);
    }
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::vector<double> times(repeats);
    for (int i = 0; i < repeats; ++i) times[i] = ends[i].ms_since(starts[i]);
    return median(std::move(times));
}

}  // namespace rmsnorm_bench
