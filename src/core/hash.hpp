// The 64-bit hashes trident's reproducibility rests on: the counter-based initialiser and data
// sampler, checkpoint checksums and the config fingerprint. Their values are part of the file
// formats and of every run's numbers: changing one changes both.
#pragma once

#include <cstdint>
#include <string_view>

namespace trident {

// splitmix64's finaliser: a bijection of 64-bit words whose outputs pass as independent uniforms
// for consecutive inputs (the counters of the initialiser and the sampler).
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over bytes: a stable hash of names and texts (std::hash may differ between builds).
constexpr uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace trident
