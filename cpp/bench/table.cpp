#include "table.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace rmsnorm_bench {
namespace {

template <typename... Args>
std::string format(const char* pattern, Args... args) {
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, pattern, args...);
    return buffer;
}

std::string line(const std::vector<std::string>& cells) {
    std::string out = "|";
    for (const std::string& cell : cells) out += " " + cell + " |";
    return out;
}

std::string separator(size_t columns) {
    std::string out = "|";
    for (size_t i = 0; i < columns; ++i) out += "---|";
    return out;
}

std::string shape_text(Shape s) { return std::to_string(s.m) + " x " + std::to_string(s.n); }

}  // namespace

std::string format_table(const std::vector<Row>& rows) {
    const bool no_dw_column =
        std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.op == Op::kBackward; });
    std::vector<std::string> head = {"op", "dtype", "M x N", "copy GB/s",
                                     std::string(kImplName) + " GB/s (%copy, us)"};
    if (no_dw_column) head.push_back("bwd without dw us");
    std::string out = line(head) + "\n" + separator(head.size()) + "\n";
    for (const Row& r : rows) {
        std::vector<std::string> cells = {
            std::string(op_name(r.op)), std::string(dtype_name(r.dtype)), shape_text(r.shape),
            format("%.0f", r.copy_gbps), format("%.0f (%.1f%%, %.1f)", r.gbps, r.pct_copy, r.us)};
        if (no_dw_column) cells.push_back(r.no_dw_us ? format("%.1f", *r.no_dw_us) : "");
        out += line(cells) + "\n";
    }
    return out;
}

std::string format_overhead_table(const std::vector<OverheadRow>& rows) {
    const std::vector<std::string> head = {"op",
                                           "impl",
                                           "dtype",
                                           "M x N",
                                           "host us per call",
                                           "graph us per call",
                                           "graph + PDL us per call"};
    std::string out = line(head) + "\n" + separator(head.size()) + "\n";
    for (const OverheadRow& r : rows) {
        out +=
            line({std::string(op_name(r.op)), kImplName, std::string(dtype_name(r.dtype)),
                  shape_text(r.shape), format("%.2f", r.host_us_per_call),
                  format("%.2f", r.graph_us_per_call), format("%.2f", r.graph_pdl_us_per_call)}) +
            "\n";
    }
    return out;
}

}  // namespace rmsnorm_bench
