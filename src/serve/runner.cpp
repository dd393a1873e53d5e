#include "serve/runner.h"

namespace h3::serve {

std::unique_ptr<JobRunner> make_generator_runner(const RunnerOptions& options, Comm& comm);

std::unique_ptr<JobRunner> make_runner(const RunnerOptions& options, Comm& comm) {
  if (options.kind == "fake") return make_fake_runner(options, comm);
  if (options.kind == "generator") {
    return make_generator_runner(options, comm);
  }
  fail("--runner '{}': expected generator or fake", options.kind);
}

}  // namespace h3::serve
