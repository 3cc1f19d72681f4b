// Reading the C API's enum fields before they are known to hold an enumerator.
#pragma once

#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace rmsnorm::detail {

// The integer an enum object holds, read from its bytes. A C caller may store any int in an
// enum field (C enums are ints), while loading a value outside a C++ enum's range is undefined
// behaviour; copying the object's bytes into its underlying type is not.
template <typename E>
std::underlying_type_t<E> enum_value(const E& object) {
    static_assert(std::is_enum_v<E>);
    std::underlying_type_t<E> value;
    static_assert(sizeof value == sizeof object);
    std::memcpy(&value, &object, sizeof value);
    return value;
}

// Whether object holds one of the enumerators listed.
template <typename E>
bool holds_one_of(const E& object, std::initializer_list<E> enumerators) {
    const auto value = enum_value(object);
    for (const E e : enumerators) {
        if (value == static_cast<std::underlying_type_t<E>>(e)) return true;
    }
    return false;
}

}  // namespace rmsnorm::detail
