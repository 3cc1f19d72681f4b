#include "cli.hpp"

#include <charconv>
#include <cstdint>
#include <sstream>
#include <string_view>

namespace rmsnorm_bench {
namespace {

// M * N bounded so that every byte count stays in int64: the fused add holds four tensors
// of M * N elements, 4 bytes each in fp32.
constexpr int64_t kMaxElements = INT64_MAX / 16;

bool is_flag(std::string_view token) { return token.size() > 1 && token[0] == '-'; }

template <typename T>
T parse_number(std::string_view flag, std::string_view text) {
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) {
        throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not a number");
    }
    return value;
}

Shape parse_shape(std::string_view text) {
    const size_t x = text.find_first_of("xX");
    if (x == std::string_view::npos) {
        throw UsageError("--shapes: '" + std::string(text) + "' is not MxN");
    }
    const Shape s{parse_number<int64_t>("--shapes", text.substr(0, x)),
                  parse_number<int64_t>("--shapes", text.substr(x + 1))};
    if (s.m < 1 || s.n < 1) {
        throw UsageError("--shapes: '" + std::string(text) + "': M and N must be >= 1");
    }
    if (s.m > kMaxElements / s.n) {
        throw UsageError("--shapes: '" + std::string(text) + "' is too large");
    }
    return s;
}

template <typename T, typename Parse>
std::vector<T> parse_list(std::string_view flag, const std::vector<std::string_view>& values,
                          Parse parse) {
    if (values.empty()) throw UsageError(std::string(flag) + " needs at least one value");
    std::vector<T> out;
    for (std::string_view v : values) out.push_back(parse(v));
    return out;
}

std::string_view single(std::string_view flag, const std::vector<std::string_view>& values) {
    if (values.size() != 1) throw UsageError(std::string(flag) + " takes one value");
    return values[0];
}

Op parse_op_value(std::string_view s) {
    if (auto op = parse_op(s)) return *op;
    throw UsageError("--op: '" + std::string(s) + "' is not fwd, add or bwd");
}

rmsnorm_dtype parse_dtype_value(std::string_view s) {
    if (auto dtype = parse_dtype(s)) return *dtype;
    throw UsageError("--dtype: '" + std::string(s) + "' is not bf16, fp16 or fp32");
}

rmsnorm_casting_mode parse_mode(std::string_view s) {
    if (s == "llama") return RMSNORM_LLAMA;
    if (s == "gemma") return RMSNORM_GEMMA;
    throw UsageError("--mode: '" + std::string(s) + "' is not llama or gemma");
}

template <typename T>
T at_least(std::string_view flag, T value, T least) {
    if (!(value >= least)) {  // also refuses NaN
        std::ostringstream message;
        message << flag << " must be >= " << least;
        throw UsageError(message.str());
    }
    return value;
}

bool takes_values(std::string_view flag) {
    return flag != "--overhead" && flag != "--help" && flag != "-h";
}

// Applies one flag and the values that followed it; false for an unknown flag.
bool apply(Options& o, std::string_view f, const std::vector<std::string_view>& v) {
    if (f == "--op") {
        o.ops = parse_list<Op>(f, v, parse_op_value);
    } else if (f == "--dtype") {
        o.dtypes = parse_list<rmsnorm_dtype>(f, v, parse_dtype_value);
    } else if (f == "--shapes") {
        o.shapes = parse_list<Shape>(f, v, parse_shape);
    } else if (f == "--mode") {
        o.casting_mode = parse_mode(single(f, v));
    } else if (f == "--warmup") {
        o.warmup_ms = at_least(f, parse_number<double>(f, single(f, v)), 0.0);
    } else if (f == "--rep") {
        o.rep_ms = at_least(f, parse_number<double>(f, single(f, v)), 0.0);
    } else if (f == "--device") {
        o.device = at_least(f, parse_number<int>(f, single(f, v)), 0);
    } else if (f == "--json") {
        o.json_path = std::string(single(f, v));
    } else if (f == "--calls") {
        o.calls = at_least(f, parse_number<int>(f, single(f, v)), 1);
    } else if (f == "--sync-every") {
        o.sync_every = at_least(f, parse_number<int>(f, single(f, v)), 1);
    } else if (f == "--overhead") {
        o.overhead = true;
    } else if (f == "--help" || f == "-h") {
        o.help = true;
    } else {
        return false;
    }
    return true;
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
    Options options;
    int i = 1;
    while (i < argc) {
        std::string_view flag = argv[i++];
        if (!is_flag(flag)) throw UsageError("unexpected argument '" + std::string(flag) + "'");
        std::vector<std::string_view> values;
        // --flag=value, as argparse also takes it.
        if (const size_t eq = flag.find('='); eq != flag.npos) {
            values.push_back(flag.substr(eq + 1));
            flag = flag.substr(0, eq);
        } else if (takes_values(flag)) {
            while (i < argc && !is_flag(argv[i])) values.emplace_back(argv[i++]);
        }
        if (!takes_values(flag) && !values.empty()) {
            throw UsageError(std::string(flag) + " takes no value");
        }
        if (!apply(options, flag, values)) {
            throw UsageError("unknown option " + std::string(flag));
        }
    }
    return options;
}

std::string usage_text() {
    return R"(usage: rmsnorm-cpp-bench [--op OP...] [--dtype DTYPE...] [--shapes MxN...]
                         [--mode llama|gemma] [--warmup MS] [--rep MS] [--device N]
                         [--json PATH] [--overhead [--calls N] [--sync-every N]]

librmsnorm's GPU kernels, through its C API, against the same-bytes copy ceiling: measured as
python -m rmsnorm_tools.bench measures the Python package, so that rows of both compare directly.

    rmsnorm-cpp-bench                     # fwd and add, bf16, the Python bench's shapes
    rmsnorm-cpp-bench --op bwd --dtype bf16 fp16 fp32 --json c.json
    rmsnorm-cpp-bench --op fwd --shapes 16384x4096 1024x65536
    rmsnorm-cpp-bench --overhead          # host microseconds per call, 1x4096 bf16

Every figure is the median over repeats of CUDA-event-timed calls on one stream, L2 flushed
(a cudaMemsetAsync of 256 MiB or more) before each repeat, after a warm-up: the method of
triton.testing.do_bench, which the Python bench uses. GB/s counts the fewest bytes an op must
move: forward reads x and writes y (2*M*N elements), fused add reads x and residual and writes
y and the sum (4*M*N), backward reads x and dy and writes dx (3*M*N); the weight, dw and rstd
are not counted. The ceiling of a shape is a device-to-device cudaMemcpyAsync moving the same
bytes (half read, half written), timed the same way in the same run; "% copy" is the op's
GB/s over it. The weight is always present; eps is 1e-6.

"bwd" is rmsnorm_backward (dx, the dw partials and their reduction) from an rstd computed
once by rmsnorm_forward; "without dw" is the same call with dw NULL.

options:
  --op OP...         fwd (forward), add (fused residual add forward), bwd (backward)
                     (default: fwd add; with --overhead: fwd add bwd)
  --dtype DTYPE...   bf16, fp16 (or f16), fp32 (or f32) (default: bf16)
  --shapes MxN...    (default: the Python bench's ten shapes; with --overhead: 1x4096)
  --mode MODE        casting mode, llama or gemma (default: llama)
  --warmup MS        warm-up, milliseconds of GPU time (default: 25)
  --rep MS           repeats, milliseconds of GPU time (default: 100; at least one repeat)
  --device N         CUDA device index (default: 0)
  --json PATH        also write the results as JSON, rewritten after every shape: the
                     structure of python -m rmsnorm_tools.bench --json, with "impl" added
  --overhead         only measure the host time per call of a loop too short to fill the
                     launch queue (a stream sync every --sync-every calls, not timed), and
                     the GPU time per call of 100 calls replayed as a CUDA graph, launched
                     plainly and with programmatic dependent launch (RMSNORM_LAUNCH_PDL)
  --calls N          --overhead: calls timed per op (default: 200)
  --sync-every N     --overhead: calls between syncs (default: 16)
  -h, --help         show this help

exit status: 0 done, 1 a CUDA or librmsnorm call failed, 2 no usable GPU, 64 bad usage
)";
}

}  // namespace rmsnorm_bench
