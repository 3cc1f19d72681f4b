// The GPU entry points on a real GPU against the CPU reference: every op (forward, fused add
// into a new tensor and in place, backward with and without dw, fused-add backward with and
// without dw), dtype, weighting and casting mode, over row widths that cross the tile and loop
// paths and their vectorised and unvectorised twins, with padded, oddly strided, misaligned and
// broadcast rows. Every run draws fresh random data; outputs are poisoned (0xFF bytes, a NaN
// in every dtype) before each call, so an element the GPU does not write fails, and whatever
// lies outside the rows must stay poisoned; inputs must come back unchanged; the same call
// twice must give the same bits. Then persistent grids, dependent launches, more than 2^31
// rows, the backward's workspace and the streams and kernels reported. (The GPU path's own
// refusals, and the entry points without a GPU: test_gpu_refusals.cpp.)
//
// Without a GPU these tests report themselves skipped ("no GPU"); set RMSNORM_REQUIRE_GPU=1 to
// make that a failure instead (on a GPU machine, so that a broken CUDA runtime or driver cannot
// pass as a skip).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_support.hpp"
#include "rmsnorm/rmsnorm.hpp"

namespace {

using rmsnorm_test::DeviceBuffer;
using rmsnorm_test::gpu_count;
using rmsnorm_test::GpuTest;
using rmsnorm_test::Stream;

// The fp32 reference, and the fp64 one when wanted, computed on a second thread meanwhile.
template <typename F>
auto references(bool fp64, const F& reference) {
    using Reference = decltype(reference(RMSNORM_ACCUMULATE_F32));
    std::future<Reference> pending64;
    if (fp64) pending64 = std::async(std::launch::async, reference, RMSNORM_ACCUMULATE_F64);
    Reference ref32 = reference(RMSNORM_ACCUMULATE_F32);
    std::optional<Reference> ref64;
    if (fp64) ref64.emplace(pending64.get());
    return std::make_pair(std::move(ref32), std::move(ref64));
}

// ---------------------------------------------------------------------------------------------
// Tensors: rows in a buffer, the same layout on the host (for the CPU reference) and the device.

size_t elem_bytes(rmsnorm_dtype dtype) { return dtype == RMSNORM_F32 ? 4 : 2; }

const char* dtype_name(rmsnorm_dtype dtype) {
    return dtype == RMSNORM_F32 ? "f32" : dtype == RMSNORM_F16 ? "f16" : "bf16";
}

float round_to(rmsnorm_dtype dtype, float v) {
    if (dtype == RMSNORM_F16) return rmsnorm_f16_to_float(rmsnorm_float_to_f16(v));
    if (dtype == RMSNORM_BF16) return rmsnorm_bf16_to_float(rmsnorm_float_to_bf16(v));
    return v;
}

// Every f16 value as a float (the library's conversion, which test_convert checks over all of
// them), for reading f16 tensors quickly.
const std::vector<float>& f16_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; ++h) t[h] = rmsnorm_f16_to_float(static_cast<uint16_t>(h));
        return t;
    }();
    return table;
}

// Where a tensor's rows lie in its buffer, in elements: row i at offset + i * stride.
struct Layout {
    int64_t rows, n, stride, offset;
};

constexpr unsigned char kPoison = 0xFF;  // 0xFFFF / 0xFFFFFFFF: a NaN in f16, bf16 and f32

// A tensor's whole buffer on the host: its rows and, around them, poison in the misaligning
// offset, in the padding between rows and in a tail after the last row.
class HostRows {
 public:
    static constexpr int64_t kTail = 16;

    HostRows(rmsnorm_dtype dtype, Layout layout)
        : dtype_(dtype),
          l_(layout),
          bytes_(static_cast<size_t>(elements()) * elem_bytes(dtype), kPoison) {}

    rmsnorm_dtype dtype() const { return dtype_; }
    const Layout& layout() const { return l_; }
    int64_t rows() const { return l_.rows; }
    int64_t n() const { return l_.n; }
    std::vector<unsigned char>& bytes() { return bytes_; }
    const std::vector<unsigned char>& bytes() const { return bytes_; }

    int64_t elements() const {
        const int64_t span =
            l_.rows == 0 ? 0 : std::max(l_.rows * l_.stride, (l_.rows - 1) * l_.stride + l_.n);
        return l_.offset + span + kTail;
    }
    void* row0() { return bytes_.data() + static_cast<size_t>(l_.offset) * elem_bytes(dtype_); }
    const void* row0() const {
        return bytes_.data() + static_cast<size_t>(l_.offset) * elem_bytes(dtype_);
    }
    // The CPU reference's view of the rows.
    rmsnorm_rows view() { return rmsnorm_rows{row0(), l_.stride, dtype_}; }

    int64_t index(int64_t i, int64_t j) const { return l_.offset + i * l_.stride + j; }
    uint32_t bits(int64_t k) const {
        const unsigned char* p = bytes_.data() + static_cast<size_t>(k) * elem_bytes(dtype_);
        if (dtype_ == RMSNORM_F32) {
            uint32_t v;
            std::memcpy(&v, p, 4);
            return v;
        }
        uint16_t v;
        std::memcpy(&v, p, 2);
        return v;
    }
    float get(int64_t i, int64_t j) const {
        const uint32_t b = bits(index(i, j));
        float f;
        if (dtype_ == RMSNORM_F32) {
            std::memcpy(&f, &b, 4);
        } else if (dtype_ == RMSNORM_BF16) {
            const uint32_t wide = b << 16;
            std::memcpy(&f, &wide, 4);
        } else {
            f = f16_table()[b];
        }
        return f;
    }
    // Stores v rounded to the dtype (round to nearest even).
    void set(int64_t i, int64_t j, float v) {
        unsigned char* p = bytes_.data() + static_cast<size_t>(index(i, j)) * elem_bytes(dtype_);
        if (dtype_ == RMSNORM_F32) {
            std::memcpy(p, &v, 4);
            return;
        }
        const uint16_t h =
            dtype_ == RMSNORM_F16 ? rmsnorm_float_to_f16(v) : rmsnorm_float_to_bf16(v);
        std::memcpy(p, &h, 2);
    }
    void set_bits(int64_t i, int64_t j, uint32_t b) {
        unsigned char* p = bytes_.data() + static_cast<size_t>(index(i, j)) * elem_bytes(dtype_);
        if (dtype_ == RMSNORM_F32) {
            std::memcpy(p, &b, 4);
        } else {
            const auto h = static_cast<uint16_t>(b);
            std::memcpy(p, &h, 2);
        }
    }

 private:
    rmsnorm_dtype dtype_;
    Layout l_;
    std::vector<unsigned char> bytes_;
};

// A tensor on the device and its host image (what is uploaded, poison included).
class DeviceRows {
 public:
    DeviceRows(rmsnorm_dtype dtype, Layout layout)
        : host_(dtype, layout), buffer_(host_.bytes().size()) {}

    HostRows& host() { return host_; }
    const HostRows& host() const { return host_; }
    void* data() const {
        return buffer_.bytes_at(static_cast<size_t>(host_.layout().offset) *
                                elem_bytes(host_.dtype()));
    }
    rmsnorm_rows view() const { return rmsnorm_rows{data(), host_.layout().stride, host_.dtype()}; }
    void upload(cudaStream_t s) const {
        CUDA_CHECK(cudaMemcpyAsync(buffer_.get(), host_.bytes().data(), buffer_.size(),
                                   cudaMemcpyHostToDevice, s));
    }
    void poison(cudaStream_t s) const {
        CUDA_CHECK(cudaMemsetAsync(buffer_.get(), kPoison, buffer_.size(), s));
    }
    // The device buffer as it is once the stream has got here.
    HostRows download(cudaStream_t s) const {
        HostRows out = host_;
        CUDA_CHECK(cudaMemcpyAsync(out.bytes().data(), buffer_.get(), buffer_.size(),
                                   cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        return out;
    }

 private:
    HostRows host_;
    DeviceBuffer buffer_;
};

// A small fast generator (splitmix64): the tests draw tens of millions of values.
class Random {
 public:
    explicit Random(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

 private:
    uint64_t state_;
};

// Fresh random values in the rows, drawn as bits: a random sign (or +, when positive), an
// exponent in [lo, hi] moved by a per-row shift in [-spread, spread] (rows of different rms)
// and a random mantissa: exact in the dtype, never zero, spread over several binades.
void fill(HostRows& t, Random& gen, int lo, int hi, int spread = 0, bool positive = false) {
    const rmsnorm_dtype d = t.dtype();
    const int mantissa_bits = d == RMSNORM_F32 ? 23 : d == RMSNORM_F16 ? 10 : 7;
    const int bias = d == RMSNORM_F16 ? 15 : 127;
    // Row stride 0: every row is the same memory; fill it once.
    const int64_t rows = t.layout().stride == 0 ? std::min<int64_t>(t.rows(), 1) : t.rows();
    for (int64_t i = 0; i < rows; ++i) {
        const int shift =
            static_cast<int>(gen.next() % static_cast<uint64_t>(2 * spread + 1)) - spread;
        for (int64_t j = 0; j < t.n(); ++j) {
            const uint64_t r = gen.next();
            const int e =
                lo + static_cast<int>((r >> 32) % static_cast<uint64_t>(hi - lo + 1)) + shift;
            const uint32_t sign = positive ? 0 : static_cast<uint32_t>(r >> 63);
            const uint32_t mantissa = static_cast<uint32_t>(r) & ((1u << mantissa_bits) - 1);
            const uint32_t bits = sign << (d == RMSNORM_F32 ? 31 : 15) |
                                  static_cast<uint32_t>(e + bias) << mantissa_bits | mantissa;
            t.set_bits(i, j, bits);
        }
    }
}

// A weight: without an offset, positive values in [0.5, 2) (as trained norm weights); with one,
// small values of either sign (|w| in [1/16, 1/2)) that the offset lifts (Gemma's 1 + w).
void fill_weight(HostRows& t, Random& gen, float offset) {
    if (offset == 0.0f) {
        fill(t, gen, -1, 0, 0, true);
    } else {
        fill(t, gen, -4, -2);
    }
}

// ---------------------------------------------------------------------------------------------
// Checks.

constexpr double kU = 0x1p-24;  // unit roundoff of fp32, the precision the GPU computes in

// The dtype's epsilon: one unit in the last place of a normal value v is at most eps * |v|.
double eps_of(rmsnorm_dtype dtype) {
    return dtype == RMSNORM_F32 ? 0x1p-23 : dtype == RMSNORM_F16 ? 0x1p-10 : 0x1p-7;
}
// The spacing of the dtype's subnormals: a rounding near zero may be off by that much.
double tiny_of(rmsnorm_dtype dtype) {
    return dtype == RMSNORM_F32 ? 0x1p-149 : dtype == RMSNORM_F16 ? 0x1p-24 : 0x1p-133;
}

// Two fp32 sums of the same m terms t in different orders (the CPU adds them one by one, the
// GPU in trees of per-thread partials) differ by up to 2 * (m - 1) * u * sum |t| in the worst
// case; the rounding errors of random data add up like a random walk instead. A simulation of
// these sums over data drawn as fill() draws it (one by one against pairwise, or against
// strided partials for dw; m up to 40000 terms, 533 rows) used at most 15% of this allowance,
// which is still orders of magnitude below what a wrong element, a missing term or a wrong row
// would give.
double sum_allowance(int64_t m) { return kU * (16.0 + std::sqrt(static_cast<double>(m))); }

// Relative difference allowed between the GPU's rstd and the CPU reference's fp32 one: the 1e-5
// the contract's tests use, widened for long rows. Both take 1/sqrt of an fp32 sum of squares,
// the GPU through an approximate rsqrt and division (a few ulp); the CPU's one-by-one sum of
// squares of values spread over many binades drifts (small terms fall below the partial sum's
// last place): in the simulation above up to 1e-5 at n = 40000, less than a third of this.
double rstd_allowance(int64_t n) { return 1e-5 + 2 * kU * std::sqrt(static_cast<double>(n)); }

constexpr int kShown = 5;  // mismatches a failure lists

// |got - want| <= tol(i, j, want) at every element of the rows, want finite; one failure with
// the count and the first few mismatches.
template <typename Tol>
::testing::AssertionResult all_near(const char* what, const HostRows& got, const HostRows& want,
                                    Tol tol) {
    int64_t bad = 0;
    std::ostringstream first;
    for (int64_t i = 0; i < want.rows(); ++i) {
        for (int64_t j = 0; j < want.n(); ++j) {
            const double g = got.get(i, j), w = want.get(i, j), t = tol(i, j, w);
            if (!(std::isfinite(w) && std::fabs(g - w) <= t)) {
                if (bad++ < kShown) {
                    first << "\n  [" << i << "," << j << "] got " << g << ", want " << w
                          << " (off by " << std::fabs(g - w) << ", tolerance " << t << ")";
                }
            }
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << bad << " of " << want.rows() * want.n()
                                         << " elements out of tolerance" << first.str();
}

// The same bits at every element of the rows (the buffers may lie differently).
::testing::AssertionResult all_equal_bits(const char* what, const HostRows& got,
                                          const HostRows& want) {
    int64_t bad = 0;
    std::ostringstream first;
    for (int64_t i = 0; i < want.rows(); ++i) {
        for (int64_t j = 0; j < want.n(); ++j) {
            const uint32_t g = got.bits(got.index(i, j)), w = want.bits(want.index(i, j));
            if (g != w && bad++ < kShown) {
                first << "\n  [" << i << "," << j << "] got " << got.get(i, j) << " (0x" << std::hex
                      << g << "), want " << want.get(i, j) << " (0x" << w << ")" << std::dec;
            }
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << bad << " of " << want.rows() * want.n()
                                         << " elements differ" << first.str();
}

// Nothing written outside the rows: the offset, the padding between rows and the tail still
// hold the poison.
::testing::AssertionResult outside_rows_untouched(const char* what, const HostRows& got) {
    const Layout& l = got.layout();
    const uint32_t poison = got.dtype() == RMSNORM_F32 ? 0xFFFFFFFFu : 0xFFFFu;
    int64_t bad = 0, first = -1;
    const auto check = [&](int64_t from, int64_t to) {  // elements [from, to) of the buffer
        for (int64_t k = from; k < to; ++k) {
            if (got.bits(k) != poison && bad++ == 0) first = k;
        }
    };
    // Output rows never overlap (stride >= n, or a single row).
    int64_t end = 0;  // where the last row checked ends
    for (int64_t i = 0; i < l.rows; ++i) {
        check(end, l.offset + i * l.stride);
        end = l.offset + i * l.stride + l.n;
    }
    check(end, got.elements());
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << what << ": " << bad << " elements outside the rows were written, the first at "
           << "element " << first << " of the buffer (rows start at " << l.offset << ", stride "
           << l.stride << ", n " << l.n << ")";
}

// The whole buffer byte for byte (inputs come back as they went; a repeated call's outputs).
::testing::AssertionResult same_bytes(const char* what, const HostRows& got, const HostRows& want) {
    if (got.bytes() == want.bytes()) return ::testing::AssertionSuccess();
    size_t k = 0;
    while (got.bytes()[k] == want.bytes()[k]) ++k;
    return ::testing::AssertionFailure() << what << ": the buffers differ, first at byte " << k
                                         << " (element " << k / elem_bytes(got.dtype()) << ")";
}

// ---------------------------------------------------------------------------------------------
// One GPU call with its buffers: inputs uploaded fresh (and read back to see that they are
// unchanged), outputs poisoned, in-out tensors (an in-place residual) uploaded; the call on
// the test's stream, then a wait and the CUDA error state; every buffer read back.

enum class Role { kIn, kOut, kInOut };

struct Binding {
    const DeviceRows* tensor;
    Role role;
    const char* name;
};

void call_gpu(const std::vector<Binding>& bindings, const DeviceBuffer* scratch,
              const std::function<rmsnorm_status()>& call, const Stream& stream,
              std::vector<HostRows>* after) {
    for (const Binding& b : bindings) {
        if (b.role == Role::kOut) {
            b.tensor->poison(stream.get());
        } else {
            b.tensor->upload(stream.get());
        }
    }
    if (scratch != nullptr && scratch->size() > 0) {
        CUDA_CHECK(cudaMemsetAsync(scratch->get(), kPoison, scratch->size(), stream.get()));
    }
    const rmsnorm_status status = call();
    ASSERT_EQ(status, RMSNORM_SUCCESS)
        << rmsnorm_status_string(status) << ": " << rmsnorm_last_error();
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    after->clear();
    for (const Binding& b : bindings) after->push_back(b.tensor->download(stream.get()));
}

// Calls twice; checks the first call's buffers (inputs unchanged, nothing written outside the
// rows of the outputs) and that the second gave the same bytes. The first call's buffers go
// to *after.
void call_gpu_twice(const std::vector<Binding>& bindings, const DeviceBuffer* scratch,
                    const std::function<rmsnorm_status()>& call, const Stream& stream,
                    std::vector<HostRows>* after) {
    ASSERT_NO_FATAL_FAILURE(call_gpu(bindings, scratch, call, stream, after));
    std::vector<HostRows> again;
    ASSERT_NO_FATAL_FAILURE(call_gpu(bindings, scratch, call, stream, &again));
    for (size_t k = 0; k < bindings.size(); ++k) {
        const Binding& b = bindings[k];
        if (b.role == Role::kIn) {
            EXPECT_TRUE(same_bytes(b.name, (*after)[k], b.tensor->host())) << " (an input)";
        } else {
            EXPECT_TRUE(outside_rows_untouched(b.name, (*after)[k]));
            EXPECT_TRUE(same_bytes(b.name, again[k], (*after)[k]))
                << " (the same call twice must give the same bits)";
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What is run: ops, weightings, shapes.

enum class Op {
    kForward,
    kFusedAdd,
    kFusedAddInPlace,
    kBackward,
    kBackwardDw,
    kFusedAddBackward,
    kFusedAddBackwardDw,
};

const char* op_name(Op op) {
    switch (op) {
        case Op::kForward:
            return "Forward";
        case Op::kFusedAdd:
            return "FusedAdd";
        case Op::kFusedAddInPlace:
            return "FusedAddInPlace";
        case Op::kBackward:
            return "Backward";
        case Op::kBackwardDw:
            return "BackwardDw";
        case Op::kFusedAddBackward:
            return "FusedAddBackward";
        case Op::kFusedAddBackwardDw:
            return "FusedAddBackwardDw";
    }
    return "?";
}

bool is_backward(Op op) {
    return op == Op::kBackward || op == Op::kBackwardDw || op == Op::kFusedAddBackward ||
           op == Op::kFusedAddBackwardDw;
}
bool wants_dw(Op op) { return op == Op::kBackwardDw || op == Op::kFusedAddBackwardDw; }

struct Weighting {
    bool has_w;
    rmsnorm_casting_mode mode;
    float offset;
    const char* name;
};

// With and without a weight, in both casting modes, with offset 0 and not.
const Weighting kWeightings[] = {
    {false, RMSNORM_LLAMA, 0.0f, "no weight, llama"},
    {false, RMSNORM_GEMMA, 0.0f, "no weight, gemma"},
    {true, RMSNORM_LLAMA, 0.0f, "weight, llama"},
    {true, RMSNORM_GEMMA, 0.0f, "weight, gemma (F.rms_norm)"},
    {true, RMSNORM_GEMMA, 1.0f, "weight with offset 1, gemma (Gemma's 1 + w)"},
    {true, RMSNORM_LLAMA, 0.5f, "weight with offset 0.5, llama"},
};
const Weighting& kLlama = kWeightings[2];
const Weighting& kGemmaOffset = kWeightings[4];

struct Shape {
    int64_t rows, n;
    std::string what;
    int64_t in_pad = 0, out_pad = 0;  // row stride n + pad: inputs (x, residual, dy, dresidual)
                                      // and outputs (y, residual_out, dx)
    int64_t in_off = 0, out_off = 0;  // base pointers this many elements past 16-byte aligned;
                                      // the weight and the backward's rstd (and workspace) go
                                      // with the inputs, dw and the forward's rstd with the
                                      // outputs
    bool broadcast = false;           // x (forward) or dy (backward) with row stride 0
    bool rstd = true;                 // forward: rstd requested
    float eps = 1e-6f;
    bool fp64 = true;  // also compared with the fp64 reference
};

struct Case {
    Shape shape;
    Weighting weighting;
};

std::string describe(const Case& c) {
    const Shape& s = c.shape;
    std::ostringstream o;
    o << s.what << ": rows " << s.rows << ", n " << s.n << ", input row stride "
      << (s.broadcast ? "0 (x/dy), " : "") << s.n + s.in_pad << ", output row stride "
      << s.n + s.out_pad;
    if (s.in_off) o << ", inputs " << s.in_off << " element(s) off alignment";
    if (s.out_off) o << ", outputs " << s.out_off << " element(s) off alignment";
    o << ", rstd " << (s.rstd ? "requested" : "not requested") << ", eps " << s.eps << "; "
      << c.weighting.name;
    return o.str();
}

// The cases of one op and dtype. Row widths: 16 is the narrowest tile; n % 16 == 0 with
// aligned rows takes the vectorised kernels, anything else their unvectorised twins; the
// forward and fused add hold rows up to 32768 in one tile and loop above (tiles of 8192 and
// 16384), the backward up to 16384 (tiles of 4096, 4 rows at a time); 2000 and 10000 (and the
// fused add's 32768) take tiles that re-read the weight instead of holding it.
std::vector<Case> cases(Op op) {
    std::vector<Weighting> weightings;
    for (const Weighting& w : kWeightings) {
        if (w.has_w || !wants_dw(op)) weightings.push_back(w);
    }
    const bool bwd = is_backward(op);
    std::vector<Case> out;

    // Every width with every weighting; rows contiguous (vectorised where n % 16 == 0).
    std::vector<int64_t> widths = {1, 7, 16, 100, 1000, 2000, 4096, 5000, 10000};
    if (bwd) {
        widths.push_back(20000);  // loops (16384 is the widest tile, among the layouts below)
    } else {
        widths.push_back(32768);  // the widest tile
        widths.push_back(40000);  // loops
    }
    for (int64_t n : widths) {
        const int64_t rows = n <= 100 ? 257 : n <= 5000 ? 5 : 2;
        for (const Weighting& w : weightings) {
            out.push_back({Shape{rows, n, "contiguous rows"}, w});
        }
    }

    // Row layouts, each with the next weighting in turn.
    std::vector<Shape> layouts;
    for (int64_t n : {16, 4096}) {
        Shape padded{3, n, "rows padded to a multiple of 16 (vectorised)"};
        padded.in_pad = 32;
        padded.out_pad = 16;
        padded.rstd = false;
        Shape odd{3, n, "row strides not a multiple of 16 (unvectorised)"};
        odd.in_pad = 3;
        odd.out_pad = 5;
        Shape in_off{3, n, "inputs misaligned by one element (unvectorised)"};
        in_off.in_off = 1;
        in_off.in_pad = 16;
        Shape out_off{1, n, "outputs misaligned by one element (unvectorised)"};
        out_off.out_off = 1;
        Shape broadcast{3, n, "one input row for all rows (row stride 0)"};
        broadcast.broadcast = true;
        broadcast.rstd = false;
        broadcast.eps = 1e-5f;
        layouts.insert(layouts.end(), {padded, odd, in_off, out_off, broadcast});
    }
    for (int64_t n : {7, 1000, 5000}) {
        Shape s{3, n, "strided and misaligned rows"};
        s.in_pad = 3;
        s.out_pad = 5;
        s.in_off = 1;
        s.out_off = 1;
        s.eps = 1e-5f;
        layouts.push_back(s);
    }
    Shape big_eps{3, 100, "eps 0.5"};
    big_eps.eps = 0.5f;
    layouts.push_back(big_eps);
    // Long rows: the loop path, vectorised and not, and the widest tile unvectorised.
    const int64_t loop_n = bwd ? 20000 : 40000, widest_tile = bwd ? 16384 : 32768;
    Shape loop_padded{3, loop_n, "loop path, padded rows (vectorised)"};
    loop_padded.in_pad = 48;
    loop_padded.out_pad = 16;
    loop_padded.rstd = false;
    Shape loop_odd{bwd ? int64_t{5} : int64_t{2}, loop_n + 7,
                   bwd ? "loop path, strided and misaligned, 4 rows a step and 1 more"
                       : "loop path, strided and misaligned"};
    loop_odd.in_pad = 3;
    loop_odd.out_pad = 9;
    loop_odd.in_off = 1;
    loop_odd.out_off = 1;
    Shape tile_odd{2, widest_tile, "widest tile, strided and misaligned"};
    tile_odd.in_pad = 5;
    tile_odd.out_pad = 3;
    tile_odd.in_off = 1;
    tile_odd.out_off = 1;
    layouts.insert(layouts.end(), {loop_padded, loop_odd, tile_odd});
    for (size_t k = 0; k < layouts.size(); ++k) {
        out.push_back({layouts[k], weightings[k % weightings.size()]});
    }

    return out;
}

// ---------------------------------------------------------------------------------------------
// The forward and the fused add against the CPU reference.

// y per the contract's roundings from the GPU's own rstd (and, fused, its sum): exactly what
// the GPU must store, as the kernels round at the same steps in the same fp32 products.
HostRows contract_y(rmsnorm_dtype dtype, const Weighting& wt, const HostRows& input,
                    const HostRows* weight, const HostRows& rstd) {
    HostRows y(dtype, Layout{input.rows(), input.n(), input.n(), 0});
    for (int64_t i = 0; i < input.rows(); ++i) {
        const float r = rstd.get(0, i);
        for (int64_t j = 0; j < input.n(); ++j) {
            const float v = input.get(i, j);
            float out = v * r;
            if (wt.has_w) {
                const float w = weight->get(0, j) + wt.offset;
                out = wt.mode == RMSNORM_LLAMA ? round_to(dtype, v * r) * w : v * r * w;
            }
            y.set(i, j, out);
        }
    }
    return y;
}

void check_forward(Op op, rmsnorm_dtype dtype, const Weighting& wt, const Shape& s, Random& gen,
                   const Stream& stream) {
    const bool fused = op != Op::kForward, in_place = op == Op::kFusedAddInPlace;
    const Layout in{s.rows, s.n, s.broadcast ? 0 : s.n + s.in_pad, s.in_off};
    const Layout in_rows{s.rows, s.n, s.n + s.in_pad, s.in_off};  // never broadcast
    const Layout out{s.rows, s.n, s.n + s.out_pad, s.out_off};

    DeviceRows x(dtype, in), y(dtype, out);
    fill(x.host(), gen, -4, 1, 1);
    std::optional<DeviceRows> weight, residual, residual_out, rstd;
    if (wt.has_w) {
        weight.emplace(dtype, Layout{1, s.n, s.n, s.in_off});
        fill_weight(weight->host(), gen, wt.offset);
    }
    if (fused) {
        // In place, the residual is also the output: a layout fit for one.
        residual.emplace(dtype, in_rows);
        fill(residual->host(), gen, -4, 0);
        if (!in_place) residual_out.emplace(dtype, out);
    }
    if (s.rstd) rstd.emplace(RMSNORM_F32, Layout{1, s.rows, s.rows, s.out_off});

    auto args = rmsnorm::forward_args();
    args.rows = s.rows;
    args.n = s.n;
    args.x = x.view();
    args.y = y.view();
    args.weight = wt.has_w ? weight->data() : nullptr;
    args.weight_dtype = dtype;
    args.rstd = s.rstd ? static_cast<float*>(rstd->data()) : nullptr;
    args.eps = s.eps;
    args.offset = wt.offset;
    args.casting_mode = wt.mode;
    if (fused) {
        args.residual = residual->view();
        args.residual_out = in_place ? residual->view() : residual_out->view();
    }

    std::vector<Binding> bindings;
    const auto bind = [&](const DeviceRows& t, Role role, const char* name) {
        bindings.push_back({&t, role, name});
        return bindings.size() - 1;
    };
    const size_t at_x = bind(x, Role::kIn, "x"), at_y = bind(y, Role::kOut, "y");
    if (wt.has_w) bind(*weight, Role::kIn, "weight");
    size_t at_sum = 0, at_rstd = 0;
    if (in_place) {
        at_sum = bind(*residual, Role::kInOut, "residual (= residual_out)");
    } else if (fused) {
        bind(*residual, Role::kIn, "residual");
        at_sum = bind(*residual_out, Role::kOut, "residual_out");
    }
    if (s.rstd) at_rstd = bind(*rstd, Role::kOut, "rstd");
    std::vector<HostRows> gpu;
    const auto call = [&] {
        return fused ? rmsnorm_fused_add_forward(&args, stream.cu())
                     : rmsnorm_forward(&args, stream.cu());
    };
    ASSERT_NO_FATAL_FAILURE(call_gpu_twice(bindings, nullptr, call, stream, &gpu));
    const HostRows& gpu_y = gpu[at_y];

    // The CPU reference on the same inputs, in the same layouts.
    struct Reference {
        HostRows y, sum, rstd;
    };
    const auto reference = [&](rmsnorm_accumulation accumulation) {
        // In place, the sum overwrites a copy of the residual.
        Reference r{HostRows(dtype, out), in_place ? residual->host() : HostRows(dtype, out),
                    HostRows(RMSNORM_F32, Layout{1, s.rows, s.rows, 0})};
        auto a = args;
        a.x = x.host().view();
        a.y = r.y.view();
        a.weight = wt.has_w ? weight->host().row0() : nullptr;
        a.rstd = static_cast<float*>(r.rstd.row0());
        a.accumulation = accumulation;
        if (fused) {
            a.residual = in_place ? r.sum.view() : residual->host().view();
            a.residual_out = r.sum.view();
        }
        rmsnorm::cpu_forward(a);
        return r;
    };
    const auto [ref32, ref64] = references(s.fp64, reference);

    // residual_out = round(x + residual): one fp32 addition and one rounding, the same bits.
    if (fused) {
        EXPECT_TRUE(all_equal_bits("residual_out", gpu[at_sum], ref32.sum));
    }

    const double eps = eps_of(dtype), tiny = tiny_of(dtype);
    if (s.rstd) {
        const double r_tol = rstd_allowance(s.n);
        const HostRows& gpu_rstd = gpu[at_rstd];
        EXPECT_TRUE(all_near("rstd vs the fp32 reference", gpu_rstd, ref32.rstd,
                             [&](int64_t, int64_t, double want) { return r_tol * want; }));
        if (ref64) {
            EXPECT_TRUE(all_near("rstd vs the fp64 reference", gpu_rstd, ref64->rstd,
                                 [&](int64_t, int64_t, double want) { return 1e-5 * want; }));
        }
        // Given the GPU's rstd, y is the contract's roundings to the bit: this tells the
        // casting modes apart, which the tolerances below cannot. (In f32 it also shows that
        // the rstd stored is the one y used: every lane holding a row's sum agrees to the bit,
        // rmsnorm.launch.configs.compile_options.)
        const HostRows& input = fused ? gpu[at_sum] : gpu[at_x];
        const HostRows want_y =
            contract_y(dtype, wt, input, wt.has_w ? &weight->host() : nullptr, gpu_rstd);
        EXPECT_TRUE(
            all_equal_bits("y vs the contract's roundings of the GPU's own rstd", gpu_y, want_y));
    }
    // y against the references: each side rounds once (gemma, or no weight), or twice (llama
    // with a weight: x * r to the dtype, then the product with the weight), at most an ulp
    // (eps * |y|) each when the exact values lie close to a rounding boundary; before that the
    // two rstd differ by up to rstd_allowance (plus the fp32 products, a few u); near zero f16
    // rounds to subnormals, a fixed spacing (tiny).
    const double k = wt.has_w && wt.mode == RMSNORM_LLAMA && dtype != RMSNORM_F32 ? 2.0 : 1.0;
    const double y_rel32 = k * eps + rstd_allowance(s.n) + 4 * kU;
    EXPECT_TRUE(
        all_near("y vs the fp32 reference", gpu_y, ref32.y,
                 [&](int64_t, int64_t, double w) { return y_rel32 * std::fabs(w) + k * tiny; }));
    // The fp64 reference is (nearly) exact: twice the roundings, and 2e-5 for the GPU's rstd.
    const double y_rel64 = 2 * k * eps + 2e-5;
    if (ref64) {
        EXPECT_TRUE(all_near(
            "y vs the fp64 reference", gpu_y, ref64->y,
            [&](int64_t, int64_t, double w) { return y_rel64 * std::fabs(w) + 2 * k * tiny; }));
    }
}

// ---------------------------------------------------------------------------------------------
// The backward and the fused-add backward against the CPU reference, from the rstd the GPU's
// forward saved.

void check_backward(Op op, rmsnorm_dtype dtype, const Weighting& wt, const Shape& s, Random& gen,
                    const Stream& stream) {
    const bool fused = op == Op::kFusedAddBackward || op == Op::kFusedAddBackwardDw;
    const bool dw_wanted = wants_dw(op);
    const Layout in{s.rows, s.n, s.broadcast ? 0 : s.n + s.in_pad, s.in_off};
    const Layout in_rows{s.rows, s.n, s.n + s.in_pad, s.in_off};
    const Layout out{s.rows, s.n, s.n + s.out_pad, s.out_off};

    DeviceRows x(dtype, in_rows), dy(dtype, in), dx(dtype, out);
    DeviceRows rstd(RMSNORM_F32, Layout{1, s.rows, s.rows, s.in_off});
    fill(x.host(), gen, -4, 1, 1);
    fill(dy.host(), gen, -4, 0, 1);
    std::optional<DeviceRows> weight, dw, dresidual;
    if (wt.has_w) {
        weight.emplace(dtype, Layout{1, s.n, s.n, s.in_off});
        fill_weight(weight->host(), gen, wt.offset);
    }
    if (dw_wanted) dw.emplace(dtype, Layout{1, s.n, s.n, s.out_off});
    if (fused) {
        dresidual.emplace(dtype, in_rows);
        fill(dresidual->host(), gen, -4, 0);
    }

    // rstd as the GPU's forward saves it (what a training step passes on).
    {
        DeviceRows y(dtype, Layout{s.rows, s.n, s.n, 0});
        auto f = rmsnorm::forward_args();
        f.rows = s.rows;
        f.n = s.n;
        f.x = x.view();
        f.y = y.view();
        f.rstd = static_cast<float*>(rstd.data());
        std::vector<HostRows> after;
        ASSERT_NO_FATAL_FAILURE(call_gpu(
            {{&x, Role::kIn, "x"}, {&y, Role::kOut, "y"}, {&rstd, Role::kOut, "rstd"}}, nullptr,
            [&] { return rmsnorm_forward(&f, stream.cu()); }, stream, &after));
        rstd.host() = after[2];
    }

    auto args = rmsnorm::backward_args();
    args.rows = s.rows;
    args.n = s.n;
    args.dy = dy.view();
    args.x = x.view();
    args.dx = dx.view();
    args.rstd = static_cast<const float*>(rstd.data());
    args.weight = wt.has_w ? weight->data() : nullptr;
    args.weight_dtype = dtype;
    args.dw = dw_wanted ? dw->data() : nullptr;
    args.offset = wt.offset;
    args.casting_mode = wt.mode;
    if (fused) args.dresidual = dresidual->view();

    // The workspace: as big as the library asks (and no bigger), poisoned before each call (a
    // partial sum read before it is written fails); misaligned with the inputs.
    size_t ws_bytes = 0;
    ASSERT_EQ(rmsnorm_backward_workspace_size(&args, &ws_bytes), RMSNORM_SUCCESS)
        << rmsnorm_last_error();
    const size_t row_bytes = static_cast<size_t>(s.n) * sizeof(float);
    if (dw_wanted) {
        // One fp32 partial row per program, at most one program per row.
        EXPECT_GT(ws_bytes, 0u);
        EXPECT_EQ(ws_bytes % row_bytes, 0u);
        EXPECT_LE(ws_bytes, static_cast<size_t>(s.rows) * row_bytes);
    } else {
        EXPECT_EQ(ws_bytes, 0u);
    }
    const size_t ws_shift = s.in_off != 0 ? 4 : 0;
    DeviceBuffer workspace(ws_bytes > 0 ? ws_bytes + ws_shift : 0);
    void* ws = ws_bytes > 0 ? workspace.bytes_at(ws_shift) : nullptr;

    std::vector<Binding> bindings = {{&dy, Role::kIn, "dy"},
                                     {&x, Role::kIn, "x"},
                                     {&rstd, Role::kIn, "rstd"},
                                     {&dx, Role::kOut, "dx"}};
    if (wt.has_w) bindings.push_back({&*weight, Role::kIn, "weight"});
    if (fused) bindings.push_back({&*dresidual, Role::kIn, "dresidual"});
    if (dw_wanted) bindings.push_back({&*dw, Role::kOut, "dw"});
    std::vector<HostRows> gpu;
    const auto call = [&] {
        return fused ? rmsnorm_fused_add_backward(&args, ws, ws_bytes, stream.cu())
                     : rmsnorm_backward(&args, ws, ws_bytes, stream.cu());
    };
    ASSERT_NO_FATAL_FAILURE(call_gpu_twice(bindings, &workspace, call, stream, &gpu));
    const HostRows& gpu_dx = gpu[3];
    const HostRows* gpu_dw = dw_wanted ? &gpu.back() : nullptr;

    struct Reference {
        HostRows dx, dw;
    };
    const auto reference = [&](rmsnorm_accumulation accumulation) {
        Reference r{HostRows(dtype, out), HostRows(dtype, Layout{1, s.n, s.n, 0})};
        auto a = args;
        a.dy = dy.host().view();
        a.x = x.host().view();
        a.dx = r.dx.view();
        a.rstd = static_cast<const float*>(rstd.host().row0());
        a.weight = wt.has_w ? weight->host().row0() : nullptr;
        a.dw = dw_wanted ? r.dw.row0() : nullptr;
        a.accumulation = accumulation;
        if (fused) a.dresidual = dresidual->host().view();
        rmsnorm::cpu_backward(a);
        return r;
    };
    const auto [ref32, ref64] = references(s.fp64, reference);

    // The scale of each gradient element: with g = dy * (w + offset), xhat = x * r and
    // m = mean(g * xhat), dx = r * (g - xhat * m) (+ dresidual) cancels, so its error is set by
    // the terms, not by dx: S = r * (|g| + |xhat| * mean|g * xhat|) + |dresidual| bounds every
    // term. Both sides round a few fp32 operations (a few u * S; the GPU fuses some into FMAs),
    // sum g * xhat in different orders (sum_allowance(n) * S), and round dx once to the dtype
    // (an ulp, eps * |dx| <= eps * S, where a value lies near a rounding boundary). dw_j sums
    // dy * xhat over the rows in different orders (the GPU through per-program partial rows):
    // sum_allowance(rows) * sum_i |dy * xhat|, then one rounding, eps * |dw|.
    const HostRows& hx = x.host();
    const HostRows& hdy = dy.host();
    const HostRows& hr = rstd.host();
    std::vector<double> scale_dx(static_cast<size_t>(s.rows * s.n)),
        scale_dw(static_cast<size_t>(s.n), 0.0);
    for (int64_t i = 0; i < s.rows; ++i) {
        const double r = hr.get(0, i);
        double mean_abs = 0;
        for (int64_t j = 0; j < s.n; ++j) {
            const double w = wt.has_w ? double(weight->host().get(0, j)) + wt.offset : 1.0;
            mean_abs += std::fabs(hdy.get(i, j) * w * hx.get(i, j) * r);
        }
        mean_abs /= double(s.n);
        for (int64_t j = 0; j < s.n; ++j) {
            const double w = wt.has_w ? double(weight->host().get(0, j)) + wt.offset : 1.0;
            const double xhat = std::fabs(hx.get(i, j) * r), dyv = std::fabs(hdy.get(i, j));
            double sc = r * (dyv * std::fabs(w) + xhat * mean_abs);
            if (fused) sc += std::fabs(dresidual->host().get(i, j));
            scale_dx[static_cast<size_t>(i * s.n + j)] = sc;
            scale_dw[static_cast<size_t>(j)] += dyv * xhat;
        }
    }
    const double eps = eps_of(dtype), tiny = tiny_of(dtype);
    const double dx_rel = eps + 16 * kU + sum_allowance(s.n);
    EXPECT_TRUE(
        all_near("dx vs the fp32 reference", gpu_dx, ref32.dx, [&](int64_t i, int64_t j, double) {
            return dx_rel * scale_dx[static_cast<size_t>(i * s.n + j)] + tiny;
        }));
    // Against fp64 (close to exact): the GPU's error alone, allowed twice the above.
    if (ref64) {
        EXPECT_TRUE(all_near(
            "dx vs the fp64 reference", gpu_dx, ref64->dx, [&](int64_t i, int64_t j, double) {
                return 2 * dx_rel * scale_dx[static_cast<size_t>(i * s.n + j)] + 2 * tiny;
            }));
    }
    if (dw_wanted) {
        const double dw_sum = sum_allowance(s.rows) + 2 * kU;
        EXPECT_TRUE(all_near(
            "dw vs the fp32 reference", *gpu_dw, ref32.dw, [&](int64_t, int64_t j, double want) {
                return eps * std::fabs(want) + dw_sum * scale_dw[static_cast<size_t>(j)] + tiny;
            }));
        if (ref64) {
            EXPECT_TRUE(all_near("dw vs the fp64 reference", *gpu_dw, ref64->dw,
                                 [&](int64_t, int64_t j, double want) {
                                     return 2 * eps * std::fabs(want) +
                                            2 * dw_sum * scale_dw[static_cast<size_t>(j)] +
                                            2 * tiny;
                                 }));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Every op and dtype against the CPU reference.

struct OpCase {
    Op op;
    rmsnorm_dtype dtype;
};

void PrintTo(const OpCase& c, std::ostream* os) {
    *os << op_name(c.op) << " " << dtype_name(c.dtype);
}

// Fresh random data every run: a seed from std::random_device, or RMSNORM_TEST_SEED's (to
// replay a failure: the failure message shows the seed).
uint64_t fresh_seed() {
    if (const char* v = std::getenv("RMSNORM_TEST_SEED")) return std::strtoull(v, nullptr, 10);
    std::random_device device;
    return uint64_t{device()} << 32 | device();
}

class GpuMatchesCpu : public GpuTest, public ::testing::WithParamInterface<OpCase> {};

TEST_P(GpuMatchesCpu, OverEveryWeightingWidthAndRowLayout) {
    const auto [op, dtype] = GetParam();
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Random gen(seed);
    const ::testing::TestResult& result =
        *::testing::UnitTest::GetInstance()->current_test_info()->result();
    int failed_cases = 0;
    for (const Case& c : cases(op)) {
        SCOPED_TRACE(describe(c));
        const int parts = result.total_part_count();
        if (is_backward(op)) {
            check_backward(op, dtype, c.weighting, c.shape, gen, stream());
        } else {
            check_forward(op, dtype, c.weighting, c.shape, gen, stream());
        }
        if (result.total_part_count() != parts && ++failed_cases == 8) {
            FAIL() << "stopping after " << failed_cases << " failing cases";
        }
    }
}

std::vector<OpCase> all_op_cases() {
    std::vector<OpCase> out;
    for (Op op : {Op::kForward, Op::kFusedAdd, Op::kFusedAddInPlace, Op::kBackward, Op::kBackwardDw,
                  Op::kFusedAddBackward, Op::kFusedAddBackwardDw}) {
        for (rmsnorm_dtype dtype : {RMSNORM_F32, RMSNORM_F16, RMSNORM_BF16}) {
            out.push_back({op, dtype});
        }
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(AllOpsAndDtypes, GpuMatchesCpu, ::testing::ValuesIn(all_op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                             return std::string(op_name(info.param.op)) + "_" +
                                    dtype_name(info.param.dtype);
                         });

// Persistent grids: more row blocks than the grid has programs, so that programs loop over
// rows (and, in the backward, add several row blocks into their dw partial row). The launch
// table caps the grid at SMs * programs_per_sm; these widths have one program per SM and take
// one row a step (the tiles) or four (the backward's loop). Large problems, so one case each,
// the dtypes taken in turn (the code paths are the same for all three), compared with the fp32
// reference only.
class GpuPersistentGrid : public GpuTest {};

TEST_F(GpuPersistentGrid, MatchesCpuWhenProgramsLoopOverRowBlocks) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Random gen(seed);
    const int64_t rows = sms() + 5;
    struct Persistent {
        Op op;
        rmsnorm_dtype dtype;
        Case c;
    };
    std::vector<Persistent> all = {
        {Op::kForward, RMSNORM_BF16, {Shape{rows, 16400, "widest tile"}, kGemmaOffset}},
        {Op::kBackwardDw, RMSNORM_F16, {Shape{rows, 5000, "dw partials in registers"}, kLlama}},
        {Op::kFusedAddBackwardDw,
         RMSNORM_F32,
         {Shape{rows, 10000, "dw partials in global memory"}, kGemmaOffset}},
        {Op::kBackwardDw,
         RMSNORM_BF16,
         {Shape{4 * int64_t{sms()} + 5, 16400, "loop path, dw partial row updated per step"},
          kLlama}},
    };
    for (Persistent& p : all) {
        p.c.shape.fp64 = false;
        SCOPED_TRACE(std::string(op_name(p.op)) + " " + dtype_name(p.dtype) + ", " + describe(p.c));
        if (is_backward(p.op)) {
            check_backward(p.op, p.dtype, p.c.weighting, p.c.shape, gen, stream());
        } else {
            check_forward(p.op, p.dtype, p.c.weighting, p.c.shape, gen, stream());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Programmatic dependent launch: chains of kernels, each reading what the one before wrote.

class GpuDependentLaunch : public GpuTest {
 protected:
    // A chain of forwards (y[i+1] = norm(y[i]), rstd saved) and of backwards back down it
    // (dx[i] = the gradient through norm i, dw of each link through the workspace the whole
    // chain shares). Every launch with `flags`; returns what the chain wrote, in order.
    std::vector<HostRows> run_chain(int64_t rows, int64_t n, unsigned flags, uint64_t seed) {
        constexpr int kLinks = 4;
        const Layout layout{rows, n, n, 0}, one{1, n, n, 0}, per_row{1, rows, rows, 0};
        Random gen(seed);
        std::vector<DeviceRows> y, rstd, dx, dw;
        for (int i = 0; i <= kLinks; ++i) y.emplace_back(RMSNORM_BF16, layout);
        DeviceRows w(RMSNORM_BF16, one), dy(RMSNORM_BF16, layout);
        fill(y[0].host(), gen, -3, 3, 2);
        fill(dy.host(), gen, -3, 3);
        fill_weight(w.host(), gen, 0.0f);
        for (const DeviceRows* t : {&y[0], &dy, &w}) t->upload(stream().get());
        for (int i = 1; i <= kLinks; ++i) y[i].poison(stream().get());
        for (int i = 0; i < kLinks; ++i) {
            rstd.emplace_back(RMSNORM_F32, per_row);
            dx.emplace_back(RMSNORM_BF16, layout);
            dw.emplace_back(RMSNORM_BF16, one);
            for (const DeviceRows* t : {&rstd[i], &dx[i], &dw[i]}) t->poison(stream().get());
        }
        auto f = rmsnorm::forward_args();
        f.rows = rows;
        f.n = n;
        f.weight = w.data();
        f.weight_dtype = RMSNORM_BF16;
        f.launch_flags = flags;
        for (int i = 0; i < kLinks; ++i) {
            f.x = y[i].view();
            f.y = y[i + 1].view();
            f.rstd = static_cast<float*>(rstd[i].data());
            EXPECT_EQ(rmsnorm_forward(&f, stream().cu()), RMSNORM_SUCCESS) << rmsnorm_last_error();
        }
        auto b = rmsnorm::backward_args();
        b.rows = rows;
        b.n = n;
        b.weight = w.data();
        b.weight_dtype = RMSNORM_BF16;
        b.launch_flags = flags;
        b.x = y[kLinks - 1].view();
        b.dy = dy.view();
        b.rstd = static_cast<const float*>(rstd[kLinks - 1].data());
        b.dx = dx[kLinks - 1].view();
        b.dw = dw[kLinks - 1].data();
        size_t bytes = 0;
        EXPECT_EQ(rmsnorm_backward_workspace_size(&b, &bytes), RMSNORM_SUCCESS);
        DeviceBuffer workspace(bytes);
        for (int i = kLinks - 1; i >= 0; --i) {
            b.x = y[i].view();
            b.dy = i == kLinks - 1 ? dy.view() : dx[i + 1].view();
            b.rstd = static_cast<const float*>(rstd[i].data());
            b.dx = dx[i].view();
            b.dw = dw[i].data();
            EXPECT_EQ(rmsnorm_backward(&b, workspace.get(), bytes, stream().cu()), RMSNORM_SUCCESS)
                << rmsnorm_last_error();
        }
        std::vector<HostRows> out;
        for (int i = 1; i <= kLinks; ++i) out.push_back(y[i].download(stream().get()));
        for (int i = 0; i < kLinks; ++i) {
            for (const DeviceRows* t : {&rstd[i], &dx[i], &dw[i]})
                out.push_back(t->download(stream().get()));
        }
        return out;
    }
};

TEST_F(GpuDependentLaunch, GivesTheBitsOfLaunchesInStreamOrder) {
    // Each kernel may start before its predecessor ends, but waits for it before its first
    // access: a kernel that did not would read poison (or half-written rows) in its input,
    // or overwrite the workspace the previous dw reduction still reads. On GPUs before sm_90
    // the flag is ignored, and the test checks that it is harmless there.
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    struct Width {
        int64_t rows, n;
        const char* path;
    };
    for (const Width& s : {Width{8 * int64_t{sms()} + 3, 4096, "tile"},
                           Width{2 * int64_t{sms()} + 1, 70000, "loop"}}) {
        SCOPED_TRACE(std::string(s.path) + " path, " + std::to_string(s.rows) + " x " +
                     std::to_string(s.n));
        const std::vector<HostRows> plain = run_chain(s.rows, s.n, 0, seed);
        const std::vector<HostRows> dependent = run_chain(s.rows, s.n, RMSNORM_LAUNCH_PDL, seed);
        ASSERT_EQ(plain.size(), dependent.size());
        for (size_t i = 0; i < plain.size(); ++i) {
            SCOPED_TRACE("output " + std::to_string(i) + " of the chain");
            EXPECT_TRUE(all_equal_bits("launched with RMSNORM_LAUNCH_PDL vs without", dependent[i],
                                       plain[i]));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Row counts beyond 32 bits: the forward splits them into launches of 2^30 rows.

TEST_F(GpuTest, AForwardOfMoreThan2To31RowsCoversEveryRow) {
    constexpr int64_t kN = 16, kRows = (int64_t{1} << 31) + 37;
    const size_t y_bytes = static_cast<size_t>(kRows * kN) * 2,
                 rstd_bytes = static_cast<size_t>(kRows) * 4;
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    if (free_bytes < y_bytes + rstd_bytes + (size_t{1} << 30)) {
        GTEST_SKIP() << "needs " << ((y_bytes + rstd_bytes) >> 30) + 1
                     << " GiB of free GPU memory, " << (free_bytes >> 30) << " GiB free";
    }
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Random gen(seed);
    // One input row read as every row (stride 0); distinct output rows.
    DeviceRows x(RMSNORM_BF16, Layout{1, kN, kN, 0}), one_y(RMSNORM_BF16, Layout{1, kN, kN, 0});
    fill(x.host(), gen, -3, 3);
    x.upload(stream().get());
    DeviceBuffer y(y_bytes), rstd(rstd_bytes), one_rstd(16);
    CUDA_CHECK(cudaMemsetAsync(y.get(), kPoison, y_bytes, stream().get()));
    CUDA_CHECK(cudaMemsetAsync(rstd.get(), kPoison, rstd_bytes, stream().get()));
    auto f = rmsnorm::forward_args();
    f.n = kN;
    f.x = rmsnorm_rows{x.data(), 0, RMSNORM_BF16};
    // The one-row forward gives the bits every row must have (the same kernel).
    f.rows = 1;
    f.y = one_y.view();
    f.rstd = static_cast<float*>(one_rstd.get());
    ASSERT_EQ(rmsnorm_forward(&f, stream().cu()), RMSNORM_SUCCESS) << rmsnorm_last_error();
    f.rows = kRows;
    f.y = rmsnorm_rows{y.get(), kN, RMSNORM_BF16};
    f.rstd = static_cast<float*>(rstd.get());
    ASSERT_EQ(rmsnorm_forward(&f, stream().cu()), RMSNORM_SUCCESS) << rmsnorm_last_error();
    const HostRows want = one_y.download(stream().get());
    float want_rstd = 0;
    CUDA_CHECK(cudaMemcpy(&want_rstd, one_rstd.get(), 4, cudaMemcpyDeviceToHost));
    const int64_t launch = int64_t{1} << 30;
    for (const int64_t row :
         {int64_t{0}, launch - 1, launch, 2 * launch - 1, 2 * launch, kRows - 1}) {
        SCOPED_TRACE("row " + std::to_string(row));
        HostRows got(RMSNORM_BF16, Layout{1, kN, kN, 0});
        CUDA_CHECK(cudaMemcpy(got.row0(), y.bytes_at(static_cast<size_t>(row * kN) * 2), kN * 2,
                              cudaMemcpyDeviceToHost));
        for (int64_t j = 0; j < kN; ++j) {
            ASSERT_EQ(got.bits(got.index(0, j)), want.bits(want.index(0, j))) << "y[" << j << "]";
        }
        float r = 0;
        CUDA_CHECK(
            cudaMemcpy(&r, rstd.bytes_at(static_cast<size_t>(row) * 4), 4, cudaMemcpyDeviceToHost));
        ASSERT_EQ(r, want_rstd);
    }
}

// ---------------------------------------------------------------------------------------------
// The workspace, no rows, the legacy default stream, which kernels serve the device.

class GpuBackward : public GpuTest {
 protected:
    static constexpr int64_t kRows = 64, kN = 256;
    // Made in SetUp, once there is a GPU.
    std::optional<DeviceRows> x_, dy_, dx_, w_, dw_, rstd_;
    rmsnorm_backward_args args = rmsnorm::backward_args();

    void SetUp() override {
        GpuTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        const Layout rows{kRows, kN, kN, 0}, one{1, kN, kN, 0};
        x_.emplace(RMSNORM_BF16, rows);
        dy_.emplace(RMSNORM_BF16, rows);
        dx_.emplace(RMSNORM_BF16, rows);
        w_.emplace(RMSNORM_BF16, one);
        dw_.emplace(RMSNORM_BF16, one);
        rstd_.emplace(RMSNORM_F32, Layout{1, kRows, kRows, 0});
        args.rows = kRows;
        args.n = kN;
        args.dy = dy_->view();
        args.x = x_->view();
        args.dx = dx_->view();
        args.rstd = static_cast<const float*>(rstd_->data());
        args.weight = w_->data();
        args.weight_dtype = RMSNORM_BF16;
        args.dw = dw_->data();
    }

    static bool all_poison(const HostRows& t) {
        return std::all_of(t.bytes().begin(), t.bytes().end(),
                           [](unsigned char b) { return b == kPoison; });
    }
};

TEST_F(GpuBackward, TooSmallAWorkspaceIsRefusedNamingIt) {
    for (const bool fused : {false, true}) {
        SCOPED_TRACE(fused ? "rmsnorm_fused_add_backward" : "rmsnorm_backward");
        args.dresidual = fused ? dy_->view() : rmsnorm_rows{nullptr, 0, RMSNORM_BF16};
        size_t need = 0;
        ASSERT_EQ(rmsnorm_backward_workspace_size(&args, &need), RMSNORM_SUCCESS)
            << rmsnorm_last_error();
        ASSERT_GT(need, 0u);
        DeviceBuffer workspace(need);
        const auto backward = [&](void* ws, size_t bytes) {
            return fused ? rmsnorm_fused_add_backward(&args, ws, bytes, stream().cu())
                         : rmsnorm_backward(&args, ws, bytes, stream().cu());
        };
        dw_->poison(stream().get());
        EXPECT_EQ(backward(workspace.get(), need - 1), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(rmsnorm_last_error()).find("workspace"), std::string::npos)
            << rmsnorm_last_error();
        EXPECT_EQ(backward(nullptr, need), RMSNORM_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(rmsnorm_last_error()).find("workspace"), std::string::npos)
            << rmsnorm_last_error();
        // Refused calls launch nothing: dw is still poison.
        EXPECT_TRUE(all_poison(dw_->download(stream().get())));
        // Without dw no workspace is needed.
        args.dw = nullptr;
        ASSERT_EQ(rmsnorm_backward_workspace_size(&args, &need), RMSNORM_SUCCESS);
        EXPECT_EQ(need, 0u);
        args.dw = dw_->data();
    }
}

TEST_F(GpuBackward, AWorkspaceOverlappingAnArgumentIsRefusedNamingBoth) {
    // The kernels write the workspace: over an input it would corrupt what they read, over an
    // output what they wrote.
    size_t need = 0;
    ASSERT_EQ(rmsnorm_backward_workspace_size(&args, &need), RMSNORM_SUCCESS)
        << rmsnorm_last_error();
    ASSERT_GT(need, 0u);
    DeviceBuffer big(need + x_->host().bytes().size());
    struct Over {
        const char* name;
        std::function<void(void*)> place;  // puts the argument at the workspace's start
    };
    const rmsnorm_backward_args base = args;
    for (const Over& over : {Over{"dx", [&](void* p) { args.dx.data = p; }},
                             Over{"x", [&](void* p) { args.x.data = p; }},
                             Over{"dw", [&](void* p) { args.dw = p; }}}) {
        SCOPED_TRACE(over.name);
        args = base;
        over.place(big.get());
        dw_->poison(stream().get());
        const rmsnorm_status status = rmsnorm_backward(&args, big.get(), need, stream().cu());
        EXPECT_EQ(status, RMSNORM_ERROR_INVALID_ARGUMENT) << rmsnorm_last_error();
        EXPECT_NE(
            std::string(rmsnorm_last_error()).find(std::string("workspace overlaps ") + over.name),
            std::string::npos)
            << rmsnorm_last_error();
        EXPECT_TRUE(all_poison(dw_->download(stream().get())));  // nothing launched
    }
    args = base;
}

TEST_F(GpuBackward, NoRowsZeroesDwAndWritesNothingElse) {
    for (const bool fused : {false, true}) {
        SCOPED_TRACE(fused ? "rmsnorm_fused_add_backward" : "rmsnorm_backward");
        args.rows = 0;
        args.rstd = nullptr;  // not needed without rows
        args.dresidual = fused ? dy_->view() : rmsnorm_rows{nullptr, 0, RMSNORM_BF16};
        size_t need = 1;
        ASSERT_EQ(rmsnorm_backward_workspace_size(&args, &need), RMSNORM_SUCCESS)
            << rmsnorm_last_error();
        EXPECT_EQ(need, 0u);
        dw_->poison(stream().get());
        dx_->poison(stream().get());
        const rmsnorm_status status =
            fused ? rmsnorm_fused_add_backward(&args, nullptr, 0, stream().cu())
                  : rmsnorm_backward(&args, nullptr, 0, stream().cu());
        ASSERT_EQ(status, RMSNORM_SUCCESS) << rmsnorm_last_error();
        ASSERT_EQ(cudaStreamSynchronize(stream().get()), cudaSuccess);
        const HostRows got = dw_->download(stream().get());
        for (int64_t j = 0; j < kN; ++j) {
            ASSERT_EQ(got.bits(got.index(0, j)), 0u) << "dw[" << j << "]: a sum over no rows is +0";
        }
        EXPECT_TRUE(outside_rows_untouched("dw", got));
        EXPECT_TRUE(all_poison(dx_->download(stream().get())));
    }
}

TEST_F(GpuBackward, NoRowsInTheForwardWritesNothing) {
    auto f = rmsnorm::forward_args();
    f.rows = 0;
    f.n = kN;
    f.x = x_->view();
    f.y = dx_->view();
    dx_->poison(stream().get());
    ASSERT_EQ(rmsnorm_forward(&f, stream().cu()), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_TRUE(all_poison(dx_->download(stream().get())));
}

TEST_F(GpuTest, RunsOnTheLegacyDefaultStream) {
    DeviceRows x(RMSNORM_F32, Layout{4, 64, 64, 0}), y(RMSNORM_F32, Layout{4, 64, 64, 0});
    for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 64; ++j) x.host().set(i, j, j % 2 ? 2.0f : -2.0f);
    auto f = rmsnorm::forward_args();
    f.rows = 4;
    f.n = 64;
    f.x = x.view();
    f.y = y.view();
    f.eps = 0.0f;
    x.upload(nullptr);
    y.poison(nullptr);
    ASSERT_EQ(rmsnorm_forward(&f, nullptr), RMSNORM_SUCCESS) << rmsnorm_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const HostRows got = y.download(nullptr);
    // rms 2: y = x / 2, up to the GPU's approximate rsqrt.
    for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 64; ++j) ASSERT_NEAR(got.get(i, j), j % 2 ? 1.0f : -1.0f, 1e-6f);
}

TEST_F(GpuTest, NamesTheKernelsServingTheDevice) {
    char text[64];
    ASSERT_EQ(rmsnorm_gpu_kernels(text, sizeof text), RMSNORM_SUCCESS) << rmsnorm_last_error();
    EXPECT_EQ(std::string(text).rfind("sm_", 0), 0u) << text;
    char small[4];
    ASSERT_EQ(rmsnorm_gpu_kernels(small, sizeof small), RMSNORM_SUCCESS);
    EXPECT_STREQ(small, "sm_");  // truncated, NUL-terminated
    EXPECT_EQ(rmsnorm_gpu_kernels(nullptr, 8), RMSNORM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(rmsnorm_gpu_kernels(text, 0), RMSNORM_ERROR_INVALID_ARGUMENT);
}

}  // namespace
