// Markdown tables in the Python bench's layout (its format_table), so that the two print
// alike and their lines can be pasted into one table.
#pragma once

#include <string>
#include <vector>

#include "results.hpp"

namespace rmsnorm_bench {

// Header, separator and one line per row; a "without dw" column when any row is bwd.
std::string format_table(const std::vector<Row>& rows);

std::string format_overhead_table(const std::vector<OverheadRow>& rows);

}  // namespace rmsnorm_bench
