// Enum values as config files and logs spell them: one table per enum serves parsing, printing
// and the list of valid values in messages.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace trident {

template <class E>
struct Named {
  E value;
  const char* name;
};

// Every enum with names specialises this with its table: an array of Named<E>.
template <class E>
inline constexpr std::array<Named<E>, 0> kNames{};

template <class E>
const char* name_of(E value) {
  for (const Named<E>& n : kNames<E>)
    if (n.value == value) return n.name;
  return "unknown";
}

// False, and `out` untouched, for a name not in E's table (names are case-sensitive).
template <class E>
bool parse_name(std::string_view name, E& out) {
  for (const Named<E>& n : kNames<E>)
    if (name == n.name) {
      out = n.value;
      return true;
    }
  return false;
}

// Every name, separated by `separator`: "a, b, c".
template <class E>
std::string joined_names(const char* separator = ", ") {
  std::string out;
  for (const Named<E>& n : kNames<E>) out += (out.empty() ? "" : separator) + std::string(n.name);
  return out;
}

// What a message lists as valid: "a or b", "one of a, b, c".
template <class E>
std::string valid_names() {
  return kNames<E>.size() == 2 ? joined_names<E>(" or ") : "one of " + joined_names<E>();
}

}  // namespace trident
