// rmsnorm-cpp-bench: librmsnorm's GPU kernels against the same-bytes copy ceiling, or their host
// launch cost (--overhead). See usage_text() in cli.cpp, or run with --help.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "cuda_resources.hpp"
#include "device.hpp"
#include "overhead.hpp"
#include "report_json.hpp"
#include "rmsnorm/rmsnorm.hpp"
#include "sweep.hpp"
#include "table.hpp"
#include "timing.hpp"

namespace rmsnorm_bench {
namespace {

// Exit statuses: scripts tell "nothing to measure here" from a failed measurement.
constexpr int kFailed = 1;
constexpr int kNoGpu = 2;
constexpr int kUsage = 64;  // sysexits' EX_USAGE: 2 is taken by "no GPU"

// The table line of a row alone, printed as each row finishes (a long sweep shows progress,
// and a run cut short still printed what it measured).
std::string progress_line(const Row& row) {
    std::string table = format_table({row});
    table.pop_back();  // the final newline
    return table.substr(table.rfind('\n') + 1);
}

int run(const Options& options) {
    const RunInfo info{open_device(options.device), options.casting_mode};
    std::cerr << "rmsnorm-cpp-bench: " << info.device.name
              << ", librmsnorm kernels: " << info.device.kernels << ", CUDA runtime "
              << info.device.cuda_runtime << ", driver " << info.device.cuda_driver << "\n";
    const Stream stream;

    if (options.overhead) {
        const std::vector<OverheadRow> rows = run_overhead(options, stream.get());
        std::cout << format_overhead_table(rows);
        if (!options.json_path.empty()) write_json(options.json_path, info, {}, rows);
        return 0;
    }

    const Timer timer(stream.get(), info.device.l2_bytes, {options.warmup_ms, options.rep_ms});
    const std::vector<Row> rows = run_sweep(options, timer, [&](const std::vector<Row>& done) {
        std::cerr << progress_line(done.back()) << std::endl;
        // Rewritten after every row, as the Python bench does: a run cut short by a time
        // limit keeps the rows it finished.
        if (!options.json_path.empty()) write_json(options.json_path, info, done, {});
    });
    std::cout << format_table(rows);
    return 0;
}

}  // namespace
}  // namespace rmsnorm_bench

int main(int argc, char** argv) {
    using namespace rmsnorm_bench;
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return 0;
        }
        return run(options);
    } catch (const UsageError& e) {
        std::cerr << "rmsnorm-cpp-bench: " << e.what() << " (see rmsnorm-cpp-bench --help)\n";
        return kUsage;
    } catch (const NoGpu& e) {
        std::cerr << "rmsnorm-cpp-bench: " << e.what() << "\n";
        return kNoGpu;
    } catch (const rmsnorm::Error& e) {
        // The library's status and rmsnorm_last_error(), as rmsnorm::check composed them.
        std::cerr << "rmsnorm-cpp-bench: librmsnorm failed: " << e.what() << "\n";
        return e.status() == RMSNORM_ERROR_NO_GPU ? kNoGpu : kFailed;
    } catch (const std::exception& e) {
        std::cerr << "rmsnorm-cpp-bench: " << e.what() << "\n";
        return kFailed;
    }
}
