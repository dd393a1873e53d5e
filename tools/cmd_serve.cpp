// h3 serve: the HTTP job server (src/serve). h3 serve-worker: one rank of its rank group (started by serve).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "core/signals.h"
#include "serve/http.h"
#include "serve/supervisor.h"
#include "serve/worker.h"

namespace h3::cli {

namespace {

// The runner's options, for serve and for the workers it starts with the same values.
void add_runner_options(CLI::App* cmd, serve::RunnerOptions& r) {
  add(cmd, opt::runner, r.kind);
  add(cmd, opt::model_dir, r.paths.model_dir);
  add_component_paths(cmd, r.paths);
  add(cmd, opt::precision, r.precision);
  add(cmd, opt::vae_precision, r.vae_precision);
  add(cmd, opt::text_precision, r.text_precision);
  add(cmd, opt::text_device, r.text_device);
  add(cmd, opt::memory_plan, r.memory);
  add(cmd, opt::host_memory, r.host_memory);
  add_dist(cmd, r.mode, r.tp, r.chunks);
  add(cmd, opt::encoder_ranks, r.encoder_ranks);
  add(cmd, opt::write_latents, r.write_latents);
  add(cmd, opt::fake_step_ms, r.fake_step_ms);
  add(cmd, opt::fake_load_ms, r.fake_load_ms);
}

// The rank group's placement, as the global options give it.
void set_placement(serve::RunnerOptions& r, const GlobalContext& ctx) {
  r.device = ctx.device;
  r.deterministic = ctx.deterministic();
  r.transport = ctx.transport;
}

// The first line of a key file, without surrounding white space; refused when not a small regular file.
std::string read_key_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  H3_CHECK(fs::is_regular_file(path, ec), "--api-key-file {}: not a regular file", path);
  H3_CHECK(fs::file_size(path, ec) <= 4096, "--api-key-file {}: larger than 4 KiB; it should hold one key", path);
  std::ifstream in(path);
  std::string key;
  std::getline(in, key);
  const auto b = key.find_first_not_of(" \t\r"), e = key.find_last_not_of(" \t\r");
  key = b == std::string::npos ? "" : key.substr(b, e - b + 1);
  H3_CHECK(!key.empty(), "--api-key-file {}: the first line is empty", path);
  return key;
}

// Every connection holds a descriptor: the soft limit is raised toward the hard one (a common 1024 default
// would refuse connections long before --max-connections).
void raise_file_limit(unsigned connections) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections) + 256;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < want)
    spdlog::warn("serve: open-file limit {} is below --max-connections {} + 256; raise `ulimit -n`", rl.rlim_cur,
                 connections);
}

int run_serve(serve::ServeOptions& o, const std::string& key_file, const GlobalContext& ctx) {
  if (!key_file.empty()) {
    H3_CHECK(o.api_key.empty(), "give --api-key or --api-key-file, not both");
    o.api_key = read_key_file(key_file);
  }
  o.ranks = ctx.ranks;
  set_placement(o.runner, ctx);
  o.device = ctx.device;
  o.self_exe = std::filesystem::read_symlink("/proc/self/exe").string();
  o.mpirun = knobs().mpirun;
  o.rank_timeout_s = world().timeout_s;
  o.log_level = std::string(spdlog::level::to_string_view(spdlog::get_level()).data());
  if (o.host != "127.0.0.1" && o.host != "::1" && o.host != "localhost" && o.api_key.empty())
    spdlog::warn("serve: listening on {} without --api-key: anyone who can reach it can submit jobs", o.host);
  ::signal(SIGPIPE, SIG_IGN);
  raise_file_limit(o.http.max_connections);
  StopSignals stop_signals;
  serve::Supervisor sup(o);
  serve::HttpServer http(sup);
  http.bind();
  stop_signals.catch_signals();
  // Stops everything from a normal thread when a signal arrives (a handler may only write to a pipe).
  std::thread stopper([&] {
    if (!stop_signals.wait()) return;
    spdlog::info("serve: stopping");
    sup.events().close();
    http.stop();
  });
  sup.start();
  std::printf("h3 serve: listening on http://%s:%d/ (store %s, %d rank%s, runner %s)\n", o.host.c_str(), http.port(),
              o.store_dir.c_str(), o.ranks, o.ranks > 1 ? "s" : "", o.runner.kind.c_str());
  std::fflush(stdout);
  http.listen();
  sup.stop();
  stop_signals.release();
  stopper.join();
  spdlog::info("serve: stopped");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "serve", "HTTP job server: a persistent rank group (--ranks N) behind an OpenAI-style video API and a web page");
  auto o = std::make_shared<serve::ServeOptions>();
  cmd->add_option("--host", o->host, "address to listen on (loopback by default; anything else exposes the API)")
      ->envname("H3_HOST")
      ->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->envname("H3_PORT")
      ->capture_default_str();
  cmd->add_option("--store", o->store_dir, "folder of the job database and the videos (created)")
      ->envname("H3_STORE")
      ->required();
  cmd->add_option("--api-key", o->api_key,
                  "require 'Authorization: Bearer KEY' on the API (on the command line the key shows in ps: prefer "
                  "--api-key-file or the environment variable)")
      ->envname("H3_API_KEY");
  auto key_file = std::make_shared<std::string>();
  cmd->add_option("--api-key-file", *key_file, "read the API key from this file (its first line)")
      ->envname("H3_API_KEY_FILE");
  cmd->add_option("--allowed-host", o->allowed_hosts,
                  "a host name the server may be reached by besides IP addresses and localhost (repeatable; '*' "
                  "turns the DNS-rebinding check off)")
      ->envname("H3_ALLOWED_HOST");
  cmd->add_option("--max-queue", o->max_queue, "queued jobs accepted before 429")
      ->check(CLI::Range(1, 1000000))
      ->envname("H3_MAX_QUEUE")
      ->capture_default_str();
  cmd->add_option("--max-body", o->http.max_body, "largest request body in bytes before 413 (chunked too)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->envname("H3_MAX_BODY")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http.api_threads,
                  "threads running API requests (the connections themselves are served by an event loop)")
      ->check(CLI::Range(1, 256))
      ->envname("H3_HTTP_THREADS")
      ->capture_default_str();
  cmd->add_option("--max-connections", o->http.max_connections,
                  "open connections at once (idle, slow and event-stream ones included)")
      ->check(CLI::Range(16, 65536))
      ->envname("H3_MAX_CONNECTIONS")
      ->capture_default_str();
  cmd->add_option("--http-idle-timeout", o->http.idle_timeout_s,
                  "seconds a connection may send or take nothing before it is closed")
      ->check(CLI::Range(1, 3600))
      ->envname("H3_HTTP_IDLE_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--stall-timeout", o->stall_timeout_s,
                  "seconds without a word from the group while a job runs before it is recreated (0: 2 x --timeout "
                  "+ 30)")
      ->check(finite_range(0, 1e7))
      ->envname("H3_STALL_TIMEOUT");
  cmd->add_option("--startup-timeout", o->startup_timeout_s, "seconds the group may take to load the models")
      ->check(finite_range(0.001, 1e7))
      ->envname("H3_STARTUP_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--max-attempts", o->max_attempts, "runs of a job interrupted by server restarts")
      ->check(CLI::Range(1, 100))
      ->envname("H3_MAX_ATTEMPTS")
      ->capture_default_str();
  cmd->add_option("--model-id", o->model_id, "the model name the API reports and accepts")
      ->envname("H3_MODEL_ID")
      ->capture_default_str();
  cmd->add_option("--lora-dir", o->lora_dir,
                  "folder of LoRA .safetensors files jobs may name in \"loras\" (switched per job, re-merged from the "
                  "pristine weights; no client paths)")
      ->envname("H3_LORA_DIR")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--debug-faults", o->debug_faults,
                "accept the x_debug_fault and x_debug_runner request fields (tests only)")
      ->envname("H3_DEBUG_FAULTS");
  add(cmd, opt::preview_every, o->preview_every);
  cmd->add_option("--event-log", o->event_log,
                  "events kept in memory for event streams that fall behind (each a few KB)")
      ->check(CLI::Range(64, 1000000))
      ->envname("H3_EVENT_LOG")
      ->capture_default_str();
  add_runner_options(cmd, o->runner);
  return [o, key_file](const GlobalContext& ctx) { return run_serve(*o, *key_file, ctx); };
}

Runner add_serve_worker(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve-worker", "one rank of h3 serve's rank group (started by h3 serve)");
  cmd->group("");  // internal: not listed in --help
  auto o = std::make_shared<serve::WorkerOptions>();
  cmd->add_option("--control", o->control, "the supervisor's control socket")->required();
  add_runner_options(cmd, o->runner);
  return [o](const GlobalContext& ctx) -> int {
    set_placement(o->runner, ctx);
    o->token = knobs().serve_token;
    ::unsetenv("H3_SERVE_TOKEN");  // not passed on to anything this worker starts
    return serve::run_worker(*o);
  };
}

}  // namespace h3::cli
