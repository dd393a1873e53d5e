#include "core/knobs.h"

#include <cstdlib>
#include <functional>
#include <mutex>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/names.h"

namespace h3 {

std::string_view fp8_attention_name(Fp8Attention a) {
  static constexpr std::array<Named<Fp8Attention>, 3> names{
      {{Fp8Attention::on, "auto"}, {Fp8Attention::off, "off"}, {Fp8Attention::require, "require"}}};
  return name_in(names, a);
}

namespace {

// Where a value came from, for error messages: "--threads" or "H3_THREADS".
struct Source {
  const KnobInfo& info;
  bool from_flag;
  std::string where() const { return from_flag ? info.flag : info.env; }
};

bool parse_bool(const std::string& v, const Source& s) {
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  fail("{}={}: expected 1 or 0 (on / off)", s.where(), v);
}

struct Row {
  KnobInfo info;
  std::function<void(Knobs&, const std::string&, const Source&)> set;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      {{"threads", "H3_THREADS", "--threads", "0", "CPU threads per rank (0: every core; --ranks N shares them out)",
        ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         char* end = nullptr;
         const long n = std::strtol(v.c_str(), &end, 10);
         if (v.empty() || *end || n < 0 || n > 4096)
           fail("{}={}: expected a thread count, 0 for every core", s.where(), v);
         k.threads = static_cast<int>(n);
       }},
      {{"cpu_gemm", "H3_CPU_GEMM", "--cpu-gemm", "fixed",
        "CPU GEMMs: fixed (our fixed reduction order: bitwise equal across world sizes) or openblas (faster)", ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         if (v != "fixed" && v != "openblas") fail("{}={}: expected fixed or openblas", s.where(), v);
         k.cpu_gemm_openblas = v == "openblas";
       }},
      {{"profile", "H3_PROFILE", "--profile-regions", "0",
        "time the profile regions (core/profile.h) of any command and print them (bench, bench-decode: --profile)", ""},
       [](Knobs& k, const std::string& v, const Source& s) { k.profile = parse_bool(v, s); }},
      {{"gemm_tune", "H3_GEMM_TUNE", "--gemm-tune", "1",
        "GPU: time cuBLASLt's candidate algorithms once per GEMM shape and keep the fastest (0: the first that runs)",
        ""},
       [](Knobs& k, const std::string& v, const Source& s) { k.gemm_tune = parse_bool(v, s); }},
      {{"gemm_algos", "H3_GEMM_ALGOS", "--gemm-algos", "auto",
        "GPU: a file of cuBLASLt's chosen algorithm per GEMM shape, read at start when it exists and rewritten as new "
        "shapes are chosen: another run with the file makes the same choices, hence the same bits, without tuning. "
        "auto: one file per GPU model in $XDG_CACHE_HOME/h3 (else ~/.cache/h3), so that runs after the first make "
        "the first's choices; none: every run tunes anew; or a path",
        ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         if (v.empty()) fail("{}: empty (auto, none or a path)", s.where());
         k.gemm_algos = v;
       }},
      {{"mkl_rt", "H3_MKL_RT", "--mkl-rt", "",
        "Intel MKL's libmkl_rt.so for the reference's f32 exp/sin/cos (off: libm; unset: the configured copy, then "
        "the loader path)",
        ""},
       [](Knobs& k, const std::string& v, const Source&) { k.mkl_rt = v; }},
      {{"mpirun", "H3_MPIRUN", "--mpirun", "mpirun", "the MPI launcher of --ranks N and of h3 serve's rank group", ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         if (v.empty()) fail("{}: empty launcher name", s.where());
         k.mpirun = v;
       }},
      {{"fp8_attention", "H3_ATTENTION_FP8", "--fp8-attention", "auto",
        "GPU fp8 recipe: auto (our FP8 attention kernel where it runs, else bf16 attention of the dequantized "
        "values), off (bf16 attention) or require (an error where the FP8 kernel cannot run)",
        ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         if (v == "auto" || v.empty())
           k.fp8_attention = Fp8Attention::on;
         else if (v == "off")
           k.fp8_attention = Fp8Attention::off;
         else if (v == "require")
           k.fp8_attention = Fp8Attention::require;
         else
           fail("{}={}: expected auto, off or require", s.where(), v);
       }},
      {{"fp8_fast_accum", "H3_FP8_FAST_ACCUM", "--fp8-fast-accum", "1",
        "GPU fp8 recipe: FP8 GEMMs accumulate at full rate (0: cuBLASLt's periodic promotion to f32, slower)", ""},
       [](Knobs& k, const std::string& v, const Source& s) { k.fp8_fast_accum = parse_bool(v, s); }},
      {{"max_device_memory", "H3_MAX_DEVICE_MEMORY", "--max-device-memory", "",
        "GPU memory this process may use, its CUDA context included (e.g. 24G, 16GiB); default: what is free on the "
        "device at start, less a margin",
        ""},
       [](Knobs& k, const std::string& v, const Source& s) {
         const int64_t bytes = parse_byte_size_or_fail(v, s.where());
         if (bytes == 0) fail("{}={}: no memory at all; give a size such as 24G, or leave it unset", s.where(), v);
         k.max_device_bytes = bytes;
       }},
      {{"debug_lora", "H3_DEBUG_LORA", "", "", "tests: RANK:FILE:STRENGTH makes that rank load another LoRA",
        "a fault-injection hook of the multi-rank LoRA tests, not an option"},
       [](Knobs& k, const std::string& v, const Source&) { k.debug_lora = v; }},
      {{"debug_fault", "H3_DEBUG_FAULT", "", "",
        "tests: RANK:BLOCK:kill|stall makes that rank die or hang at that block",
        "a fault-injection hook of the failure tests, not an option; h3 serve sets it per job for its workers"},
       [](Knobs& k, const std::string& v, const Source&) { k.debug_fault = v; }},
      {{"serve_token", "H3_SERVE_TOKEN", "", "", "h3 serve's shared secret with the workers it starts",
        "a secret: a flag would show it to every user of the machine (ps); h3 serve sets it for its workers", true},
       [](Knobs& k, const std::string& v, const Source&) { k.serve_token = v; }},
      {{"tmpdir", "TMPDIR", "", "/tmp", "where h3 serve makes the folder of its control socket",
        "the system's variable for temporary files"},
       [](Knobs& k, const std::string& v, const Source&) { k.tmpdir = v; }},
  };
  return r;
}

std::mutex g_mu;
std::string g_debug_fault;
bool g_debug_fault_set = false;

struct State {
  Knobs knobs;
  std::vector<std::string> set;       // "name=value (source)" of every knob given a value, secrets masked
  std::vector<std::string> flag_env;  // "VARIABLE=value" of every knob given by a flag
};

State parse(const std::map<std::string, std::string>& overrides) {
  for (const auto& [name, value] : overrides) {
    bool known = false;
    for (const Row& row : rows()) known = known || name == row.info.name;
    H3_ASSERT(known, "load_knobs: unknown knob '{}'", name);
  }
  State st;
  Knobs& k = st.knobs;
  for (const Row& row : rows()) {
    if (*row.info.def) row.set(k, row.info.def, Source{row.info, false});
    std::string value, from;
    if (const char* e = std::getenv(row.info.env); e && *e) value = e, from = row.info.env;
    if (auto it = overrides.find(row.info.name); it != overrides.end()) value = it->second, from = row.info.flag;
    if (from.empty()) continue;
    const bool from_flag = from == row.info.flag && *row.info.flag;
    row.set(k, value, Source{row.info, from_flag});
    if (from_flag) st.flag_env.push_back(std::string(row.info.env) + "=" + value);
    if (value != row.info.def)
      st.set.push_back(fmt::format("{}={} ({})", row.info.name, row.info.secret ? "***" : value, from));
  }
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) k.in_mpi_job = true;
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char* e = std::getenv(v); e && *e && k.local_rank < 0) k.local_rank = std::atoi(e);
  k.cache_dir = user_cache_dir(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
  return st;
}

State& current() {
  static State st = parse({});
  return st;
}

}  // namespace

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> t = [] {
    std::vector<KnobInfo> v;
    for (const Row& row : rows()) v.push_back(row.info);
    return v;
  }();
  return t;
}

std::string user_cache_dir(const char* xdg_cache_home, const char* home) {
  if (xdg_cache_home && xdg_cache_home[0] == '/') return std::string(xdg_cache_home) + "/h3";
  if (home && *home) return std::string(home) + "/.cache/h3";
  return "";
}

const Knobs& knobs() {
  return current().knobs;
}

void load_knobs(const std::map<std::string, std::string>& overrides) {
  current() = parse(overrides);
}

std::string knobs_summary() {
  std::string s;
  for (const std::string& e : current().set) s += (s.empty() ? "" : ", ") + e;
  return s.empty() ? "defaults" : s;
}

std::vector<std::string> knob_flag_environment() {
  return current().flag_env;
}

Numerics numerics_from_knobs(bool deterministic) {
  Numerics n;
  n.deterministic = deterministic;
  n.fp8_attention = knobs().fp8_attention;
  n.fp8_fast_accum = knobs().fp8_fast_accum;
  return n;
}

std::string debug_fault() {
  std::lock_guard lock(g_mu);
  return g_debug_fault_set ? g_debug_fault : knobs().debug_fault;
}

void set_debug_fault(const std::string& spec) {
  std::lock_guard lock(g_mu);
  g_debug_fault = spec;
  g_debug_fault_set = true;
}

}  // namespace h3
