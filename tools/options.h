// The options that several commands take, each defined once (after llama.cpp's common/arg.cpp: one definition per
// option, tagged with the commands that take it): its names, environment variable, values or check, one help text,
// and the commands that take it. A command attaches a row to its own variable with add(cmd, opt::precision, value);
// a row that does not list the command is an internal error at start-up. An option only one command takes is
// defined in that command's file, in the same form where the command's options read as a list (cmd_generate.cpp).
//
// Where commands took the same option with different values, variables or displayed defaults before the table,
// the row's uses keep those differences (a script may rely on them); the help text is one for every command and
// says what each does with it where that differs.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/knobs.h"

namespace h3 {
struct ModelPaths;  // pipeline/generator.h
}  // namespace h3

namespace h3::cli {

// A number within [lo, hi]; unlike CLI::Range it refuses nan and inf (every comparison with nan is false).
CLI::Validator finite_range(double lo, double hi);
// A size of memory as core/byte_size.h reads it ("64GB", "48GiB", "16G").
CLI::Validator byte_size();

// A copy of `from` with one field set: the builders of OptionUse and OptionDef below.
template <typename S, typename T>
S with_field(const S& from, T S::*field, T value) {
  S s = from;
  s.*field = std::move(value);
  return s;
}

// One command that takes an option, and where it departs from the row.
struct OptionUse {
  std::string command;                  // "generate"
  std::vector<std::string> values;      // the values this command runs, when fewer than the row's
  bool env = true;                      // reads the row's environment variable
  bool show_default = false;            // --help shows the default value
  bool required = false;                // the command needs a value
  std::optional<CLI::Validator> check;  // a check of this command's own, after the row's
  bool row_check = true;                // applies the row's check (false: a command that took any value before)

  // Builders, so that a use reads as one entry: take("forward").no_env().shows_default().
  OptionUse only(std::vector<std::string> subset) const {
    return with_field(*this, &OptionUse::values, std::move(subset));
  }
  OptionUse no_env() const { return with_field(*this, &OptionUse::env, false); }
  OptionUse shows_default() const { return with_field(*this, &OptionUse::show_default, true); }
  OptionUse needed() const { return with_field(*this, &OptionUse::required, true); }
  OptionUse checked(CLI::Validator v) const {
    return with_field(*this, &OptionUse::check, std::optional(std::move(v)));
  }
  OptionUse unchecked() const { return with_field(*this, &OptionUse::row_check, false); }
};
OptionUse take(std::string command);

struct OptionDef {
  std::string names;                    // CLI11's spelling: "-s,--seed" (short flags first)
  std::string help;                     // one text for every command that takes it
  std::string env;                      // the environment variable ("": none)
  std::vector<std::string> values;      // the values it takes (empty: any); a command may take fewer
  std::optional<CLI::Validator> check;  // a check of every value (a range)
  std::vector<OptionUse> uses;          // the commands that take it
  // The run-time option of core/knobs.h that parses the value ("": none). Its variable (env) is then read by the
  // knob table, not by CLI11, so that an error names the flag or the variable that gave the value; tools/main.cpp
  // attaches such a row to the commands it lists and hands what was given to load_knobs().
  std::string knob;

  // Builders, so that a row reads as its parts: option("--mode", "...").with_env("H3_MODE").taken_by({...}).
  OptionDef with_env(std::string variable) const { return with_field(*this, &OptionDef::env, std::move(variable)); }
  OptionDef with_values(std::vector<std::string> accepted) const {
    return with_field(*this, &OptionDef::values, std::move(accepted));
  }
  OptionDef with_check(CLI::Validator v) const {
    return with_field(*this, &OptionDef::check, std::optional(std::move(v)));
  }
  OptionDef taken_by(std::vector<OptionUse> commands) const {
    return with_field(*this, &OptionDef::uses, std::move(commands));
  }

  // The use of `command`; throws (an internal error: the row and the command's file disagree) when none.
  const OptionUse& use_in(const std::string& command) const;
};
OptionDef option(std::string names, std::string help);
// The row of a knob with a flag (core/knobs.h): its flag, variable and help as the knob table has them, for the
// knobs only some commands take.
OptionDef knob_option(const std::string& knob);
// A knob's help as --help shows it: "HELP (environment: VARIABLE; default VALUE)".
std::string knob_help(const KnobInfo& k);

// Applies the row and the command's use (values, checks, variable, required, shown default) to `o`, added to
// `cmd` with the row's names and help.
CLI::Option* finish_option(CLI::Option* o, const OptionDef& def, const std::string& command);

// Attaches `def` to `cmd`, bound to `value` (a flag for bool); further settings go on the returned option.
template <typename T>
CLI::Option* add(CLI::App* cmd, const OptionDef& def, T& value) {
  return finish_option(cmd->add_option(def.names, value, def.help), def, cmd->get_name());
}
inline CLI::Option* add(CLI::App* cmd, const OptionDef& def, bool& flag) {
  return finish_option(cmd->add_flag(def.names, flag, def.help), def, cmd->get_name());
}

// The rows (tools/options.cpp). Precisions and where the text tower runs:
namespace opt {
extern const OptionDef precision, vae_precision, text_precision, text_device, memory_plan;
// How the DiT is spread over --ranks N (distributed/plan.h) and where the text tower stays:
extern const OptionDef mode, tp, chunks, encoder_ranks;
// Weights: the folder of every component, one DiT checkpoint (forward, bench), or one path per component:
extern const OptionDef model_dir, dit_checkpoint, dit, video_vae, audio_vae, text_encoder, tokenizer, lora, weights;
// The request or workload:
extern const OptionDef seed, width, height, frames, reps, res, seq, profile, no_audio;
// Output:
extern const OptionDef output, json, steps;
// The GPU memory the process may use (the knob max_device_memory; tools/main.cpp attaches it), and the host memory
// each rank may use (where streamed layers wait):
extern const OptionDef max_device_memory, host_memory;
// h3 serve's runner (serve and serve-worker):
extern const OptionDef runner, write_latents, fake_step_ms, fake_load_ms;
// Previews while denoising (generate, serve):
extern const OptionDef preview_every;
}  // namespace opt

// opt::mode, opt::tp and opt::chunks attached in that order: how a command spreads the DiT over its ranks.
void add_dist(CLI::App* cmd, std::string& mode, int& tp, int& chunks);

// opt::dit, opt::video_vae, opt::audio_vae, opt::text_encoder and opt::tokenizer attached in that order: the
// component paths that override the model folder's.
void add_component_paths(CLI::App* cmd, ModelPaths& paths);

// Every row, for the tests.
const std::vector<const OptionDef*>& option_table();

}  // namespace h3::cli
