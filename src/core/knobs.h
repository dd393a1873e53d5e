// The run-time options of the engine as one table (after llama.cpp's common arguments: every option has a name, an
// environment variable, a command-line flag or the reason it has none, a default and a help line). `h3` parses the
// table once at start-up from its flags and the environment and logs what is set; programs without that front end
// (the tests, the benchmarks) get the environment's values on first use. This file and tools/main.cpp are the only
// readers of the environment.
//
// What the model computes is not a knob read deep inside: numerics (deterministic mode, FP8 attention, FP8
// accumulation) travel as data (core/numerics.h) from tools/main.cpp into the backend's and the model's options.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/numerics.h"

namespace h3 {

struct Knobs {
  int threads = 0;                  // H3_THREADS: CPU threads per rank (0: every core)
  bool cpu_gemm_openblas = false;   // H3_CPU_GEMM=openblas: OpenBLAS GEMMs (faster, not bitwise over ranks)
  bool profile = false;             // H3_PROFILE=1: time the profile regions of any command
  bool gemm_tune = true;            // H3_GEMM_TUNE: time cuBLASLt's candidates per GEMM shape
  std::string gemm_algos = "auto";  // H3_GEMM_ALGOS: a file keeping cuBLASLt's choice per GEMM shape across runs
  std::string mkl_rt;               // H3_MKL_RT: "" (search), "off", or the path of libmkl_rt.so
  std::string mpirun = "mpirun";    // H3_MPIRUN: the launcher of --ranks N and of h3 serve's rank group
  Fp8Attention fp8_attention = Fp8Attention::on;  // H3_ATTENTION_FP8: auto (on), off, require
  bool fp8_fast_accum = true;                     // H3_FP8_FAST_ACCUM: FP8 GEMMs without periodic f32 promotion
  int64_t max_device_bytes = 0;                   // H3_MAX_DEVICE_MEMORY: 0 = what is free at start, less a margin
  std::string debug_lora;                         // H3_DEBUG_LORA (tests): RANK:FILE:STRENGTH loads another LoRA there
  std::string debug_fault;                        // H3_DEBUG_FAULT (tests): read through debug_fault() below
  std::string serve_token;                        // H3_SERVE_TOKEN: h3 serve's secret for its workers
  std::string tmpdir;                             // TMPDIR: where h3 serve makes its control socket's folder
  // Set by the launcher (mpirun / srun), read only:
  bool in_mpi_job = false;  // OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or MPI_LOCALNRANKS present
  int local_rank = -1;      // OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID (-1: not given)
  std::string cache_dir;    // user_cache_dir() of XDG_CACHE_HOME and HOME
};

// This user's folder for h3's caches: $XDG_CACHE_HOME/h3 when that is an absolute path (the XDG base directory rule),
// else $HOME/.cache/h3; "" when neither is set. Nothing is created.
std::string user_cache_dir(const char* xdg_cache_home, const char* home);

// One row of the table.
struct KnobInfo {
  const char* name;  // "threads"
  const char* env;   // "H3_THREADS"
  const char* flag;  // "--threads", or "" with `env_only` saying why
  const char* def;   // the default, as written in the environment
  const char* help;
  const char* env_only;  // why there is no flag ("" when there is one)
  bool secret = false;   // never logged
};
const std::vector<KnobInfo>& knob_table();

// The process's values: load_knobs()'s, or the environment's at first use.
const Knobs& knobs();
// Parses every knob from the environment, then `overrides` (knob name -> value, from the command line), and
// replaces the process's values. Throws naming the knob, its flag or variable, and the values it takes.
void load_knobs(const std::map<std::string, std::string>& overrides = {});
// "threads=4 (--threads), cpu_gemm=openblas (H3_CPU_GEMM)": the knobs set away from their defaults, secrets
// masked; "defaults" when none is.
std::string knobs_summary();
// The knobs given by a command-line flag, as the variables that carry them ("H3_GEMM_TUNE=0"): for the processes
// this one starts (h3 serve's workers), which read the environment.
std::vector<std::string> knob_flag_environment();
// The numerics the knobs select, with `deterministic` from the command line.
Numerics numerics_from_knobs(bool deterministic);

// H3_DEBUG_FAULT (tests): "RANK:BLOCK:kill|stall" makes that rank fail at that DiT block (or denoising step, in h3
// serve's fake runner): the knob's value until set_debug_fault() replaces it (h3 serve's workers, per job).
std::string debug_fault();
void set_debug_fault(const std::string& spec);

}  // namespace h3
