// GPU time of a call, measured as triton.testing.do_bench measures it (the Python bench's
// timer), so that the two benchmarks' figures differ only by what they time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "cuda_resources.hpp"

namespace rmsnorm_bench {

struct TimingSettings {
    double warmup_ms = 25;  // GPU time spent warming up
    double rep_ms = 100;    // GPU time spent on timed repeats
};

class Timer {
 public:
    // l2_bytes: the device's L2; the flush buffer is 256 MiB (do_bench's) or 4x L2 if larger.
    Timer(cudaStream_t stream, size_t l2_bytes, TimingSettings settings);

    // Median milliseconds of fn, which enqueues its work on the stream. do_bench's method:
    // one call, then an estimate over 5 calls sets how many warm-up calls and timed repeats
    // fill warmup_ms and rep_ms; each repeat flushes L2 first and is timed by its own pair of
    // events, so the host's launch cost hides behind the flush and only GPU time counts.
    double median_ms(const std::function<void()>& fn) const;

    cudaStream_t stream() const noexcept { return stream_; }

 private:
    void flush_l2() const;

    cudaStream_t stream_;
    DeviceBuffer flush_buffer_;
    TimingSettings settings_;
};

}  // namespace rmsnorm_bench
