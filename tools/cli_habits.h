// The command-line habits of llama.cpp's tools, on top of CLI11: every usage error exits 2 (CLI11's own codes are
// 104-114) and says "did you mean ..." for a misspelt command or option; each command's --help lists the global
// options that apply to it; `h3 --version` says what was compiled in.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace h3::cli {

// Exit status of every usage error (a bad flag, a missing value, an unknown command, a refused request).
inline constexpr int kUsageError = 2;

// The candidate closest to `word` by edit distance (adjacent transpositions count once), or "" when none is close
// enough to be a plausible typo (at most 1 edit for words of up to 4 characters, 2 up to 8, else 3).
std::string closest_word(const std::string& word, const std::vector<std::string>& candidates);

// After a parse error: "did you mean 'generate'?" lines for the misspelt command and options of argv, or "".
std::string did_you_mean(const CLI::App& app, int argc, const char* const* argv);

// Prints the parse error (or the help / version text) the way CLI11 does, adds the suggestions, and returns the
// exit status: 0 for --help / --version, kUsageError for every error.
int exit_on_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv);

// Appends to each command's --help the global options (registered on `app`) that the command uses: `globals`
// maps a command name to option names ("--ranks", ...); a command not listed gets every global option.
void add_global_option_footers(CLI::App& app,
                               const std::vector<std::pair<std::string, std::vector<std::string>>>& globals);

// `h3 --version`: version, git revision, build type and compiler, and the backends compiled in (CPU BLAS, CUDA
// architectures, NCCL, cuDNN, FFmpeg, MPI, the HTTP server).
std::string version_text();

}  // namespace h3::cli
