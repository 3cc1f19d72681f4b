#include "report_json.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "json_writer.hpp"

namespace rmsnorm_bench {
namespace {

// The fields that name a measured case, first in every row (the Python bench's order).
void write_case(JsonWriter& j, Op op, rmsnorm_dtype dtype, Shape shape) {
    j.string_field("op", op_name(op));
    j.string_field("dtype", dtype_name(dtype));
    j.integer_field("M", shape.m);
    j.integer_field("N", shape.n);
}

void write_row(JsonWriter& j, const Row& r) {
    j.begin_object();
    write_case(j, r.op, r.dtype, r.shape);
    j.integer_field("bytes", static_cast<int64_t>(r.bytes));
    j.number_field("copy_gbps", r.copy_gbps);
    j.key("impls");
    j.begin_object();
    j.key(kImplName);
    j.begin_object();
    j.number_field("us", r.us);
    j.number_field("gbps", r.gbps);
    j.number_field("pct_copy", r.pct_copy);
    j.end_object();
    j.end_object();
    // The Python bench's key for the same figure. Its dw_reduce_us and dw_reduce_pct are not
    // written: the C API has no way to launch the dw reduction alone.
    if (r.no_dw_us) j.number_field("bwd_no_dw_us", *r.no_dw_us);
    j.string_field("impl", kImplName);
    j.end_object();
}

void write_overhead_row(JsonWriter& j, const OverheadRow& r) {
    j.begin_object();
    write_case(j, r.op, r.dtype, r.shape);
    j.string_field("impl", kImplName);
    j.integer_field("calls", r.calls);
    j.integer_field("sync_every", r.sync_every);
    j.number_field("host_us_per_call", r.host_us_per_call);
    j.integer_field("chain_calls", r.chain_calls);
    j.number_field("graph_us_per_call", r.graph_us_per_call);
    j.number_field("graph_pdl_us_per_call", r.graph_pdl_us_per_call);
    j.end_object();
}

void write_document(std::ostream& out, const RunInfo& info, const std::vector<Row>& rows,
                    const std::vector<OverheadRow>& overhead) {
    JsonWriter j(out);
    j.begin_object();
    j.string_field("device", info.device.name);
    // Where the Python bench writes "torch": its version; here what was measured instead.
    j.string_field("impl", kImplName);
    j.string_field("kernels", info.device.kernels);
    j.string_field("cuda_runtime", info.device.cuda_runtime);
    j.string_field("cuda_driver", info.device.cuda_driver);
    j.string_field("casting_mode", info.casting_mode == RMSNORM_GEMMA ? "gemma" : "llama");
    j.key("rows");
    j.begin_array();
    for (const Row& r : rows) write_row(j, r);
    j.end_array();
    if (!overhead.empty()) {
        j.key("overhead");
        j.begin_array();
        for (const OverheadRow& r : overhead) write_overhead_row(j, r);
        j.end_array();
    }
    j.end_object();
    out << '\n';
}

}  // namespace

void write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows,
                const std::vector<OverheadRow>& overhead) {
    const std::string temporary = path + ".tmp";
    {
        std::ofstream out(temporary, std::ios::trunc);
        if (!out)
            throw std::runtime_error("cannot write " + temporary + ": " + std::strerror(errno));
        write_document(out, info, rows, overhead);
        out.close();
        if (!out) throw std::runtime_error("writing " + temporary + " failed");
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        throw std::runtime_error("cannot rename " + temporary + " to " + path + ": " +
                                 std::strerror(errno));
    }
}

}  // namespace rmsnorm_bench
