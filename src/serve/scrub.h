// Server paths out of the text clients see (error messages, notes, the group's last error): the known folders
// (the store, the LoRA folder, the model paths) become symbolic names, and any other absolute path keeps only its
// last component ("/srv/x/y/model.safetensors" -> ".../model.safetensors"). Linear in the text: messages echo
// client input of any length, so no regular expression (a backtracking one recursed off the stack on a 26 KB
// field) and no replacement that moves the rest of the text each time.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace h3::serve {

// `known` maps path prefixes to names ({"/srv/store", "<store>"}), the longest first (so a folder inside another is
// named by the inner one); paths shorter than 2 characters are ignored.
std::string scrub_paths(std::string_view text, const std::vector<std::pair<std::string, std::string>>& known);

}  // namespace h3::serve
