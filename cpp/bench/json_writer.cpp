#include "json_writer.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace rmsnorm_bench {

void JsonWriter::before_value() {
    if (after_key_) {  // the key wrote the separator and indentation
        after_key_ = false;
        return;
    }
    if (!counts_.empty()) {
        out_ << (counts_.back() > 0 ? ",\n" : "\n") << std::string(counts_.size(), ' ');
        ++counts_.back();
    }
}

void JsonWriter::begin_object() {
    before_value();
    out_ << '{';
    counts_.push_back(0);
}

void JsonWriter::begin_array() {
    before_value();
    out_ << '[';
    counts_.push_back(0);
}

void JsonWriter::close(char bracket) {
    const bool empty = counts_.back() == 0;
    counts_.pop_back();
    if (!empty) out_ << '\n' << std::string(counts_.size(), ' ');
    out_ << bracket;
}

void JsonWriter::end_object() { close('}'); }
void JsonWriter::end_array() { close(']'); }

void JsonWriter::key(std::string_view name) {
    before_value();
    quoted(name);
    out_ << ": ";
    after_key_ = true;
}

void JsonWriter::string(std::string_view value) {
    before_value();
    quoted(value);
}

void JsonWriter::quoted(std::string_view value) {
    out_ << '"';
    for (const char c : value) {
        switch (c) {
            case '"':
                out_ << "\\\"";
                break;
            case '\\':
                out_ << "\\\\";
                break;
            case '\n':
                out_ << "\\n";
                break;
            case '\t':
                out_ << "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char escaped[8];
                    std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
                    out_ << escaped;
                } else {
                    out_ << c;
                }
        }
    }
    out_ << '"';
}

void JsonWriter::integer(int64_t value) {
    before_value();
    out_ << value;
}

void JsonWriter::number(double value) {
    before_value();
    if (!std::isfinite(value)) {
        out_ << "null";
        return;
    }
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out_ << std::string_view(buffer, static_cast<size_t>(result.ptr - buffer));
}

void JsonWriter::string_field(std::string_view name, std::string_view value) {
    key(name);
    string(value);
}

void JsonWriter::integer_field(std::string_view name, int64_t value) {
    key(name);
    integer(value);
}

void JsonWriter::number_field(std::string_view name, double value) {
    key(name);
    number(value);
}

}  // namespace rmsnorm_bench
