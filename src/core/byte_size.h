// Sizes of memory as people write them on a command line ("24G", "16GiB", "48000M", "24GB", "1073741824") and as
// h3 prints them. K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024 (what GPU tools and the CUDA runtime report);
// KB, MB, GB, TB are powers of 1000 (what disk and link speeds use); a plain number is bytes. Case-insensitive;
// fractions allowed ("1.5G").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace h3 {

// The bytes `text` names, or nullopt when it is not a size (empty, negative, not finite, an unknown suffix, or more
// than 2^62 bytes).
std::optional<int64_t> parse_byte_size(const std::string& text);
// The same; throws naming `what` (the flag or variable) and the accepted spellings.
int64_t parse_byte_size_or_fail(const std::string& text, const std::string& what);
// "23.50 GiB", "512.0 MiB", "4.0 KiB", "17 B".
std::string format_byte_size(int64_t bytes);

}  // namespace h3
