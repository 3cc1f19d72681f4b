// The command line: argparse-like (a list flag takes every value up to the next flag), with
// the Python bench's flag names, so that one command line serves both.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "problem.hpp"
#include "rmsnorm/rmsnorm.h"

namespace rmsnorm_bench {

// A bad command line: main prints it with a pointer to --help.
class UsageError : public std::runtime_error {
 public:
    using std::runtime_error::runtime_error;
};

struct Options {
    std::vector<Op> ops;  // empty: the default of the mode (sweep or --overhead)
    std::vector<rmsnorm_dtype> dtypes{RMSNORM_BF16};
    std::vector<Shape> shapes;  // empty: the default of the mode
    rmsnorm_casting_mode casting_mode = RMSNORM_LLAMA;
    double warmup_ms = 25;  // do_bench's defaults, as the Python bench passes them
    double rep_ms = 100;
    int device = 0;
    std::string json_path;  // empty: no JSON
    bool overhead = false;
    int calls = 200;      // --overhead: calls timed per op
    int sync_every = 16;  // --overhead: calls between stream syncs
    bool help = false;
};

// Throws UsageError.
Options parse_options(int argc, const char* const* argv);

std::string usage_text();

}  // namespace rmsnorm_bench
