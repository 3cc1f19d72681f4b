// A minimal streaming JSON writer (the benchmark's only JSON need is writing its results;
// a dependency for that would cost more than these lines). Indented one space per level, as
// the Python bench's json.dump(..., indent=1) writes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <vector>

namespace rmsnorm_bench {

class JsonWriter {
 public:
    explicit JsonWriter(std::ostream& out) : out_(out) {}

    void begin_object();
    void end_object();
    void begin_array();
    void end_array();
    // The key of the next value, inside an object.
    void key(std::string_view name);
    void string(std::string_view value);
    void integer(int64_t value);
    // Shortest round-trip form; null for inf and NaN, which JSON has no spelling for.
    void number(double value);

    // key, then value.
    void string_field(std::string_view name, std::string_view value);
    void integer_field(std::string_view name, int64_t value);
    void number_field(std::string_view name, double value);

 private:
    // The separator and indentation a value needs where it stands.
    void before_value();
    void quoted(std::string_view text);
    void close(char bracket);

    std::ostream& out_;
    std::vector<int> counts_;  // values written so far at each open level
    bool after_key_ = false;
};

}  // namespace rmsnorm_bench
