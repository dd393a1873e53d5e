// `h3 verify` for DiT golden files: runs the engine on every case of the file and compares outputs (and the named
// intermediate activations) with the reference's f64 outputs.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/dit/dit.h"

namespace h3 {

struct VerifyOptions {
  Precision precision = Precision::f64;
  std::string weights;              // "" = the file's own (or procedural, as its metadata says)
  std::vector<std::string> loras;   // "FILE[:STRENGTH]" merged on load (model/dit/lora.h)
  std::optional<double> tolerance;  // overrides the default for the precision
  std::string dump_prefix;
  std::optional<DistOptions> dist;  // run distributed over world() with these options
  Device device = Device::cpu;      // cuda: bf16 or fp8 on the GPU
  Numerics numerics;                // the GPU backend's (core/numerics.h)
};

struct VerifyLine {
  std::string what;  // "t2va video", "t2va act.block.1", ...
  double rel_l2 = 0, max_abs = 0, tolerance = 0;
  bool pass = false;
};

struct VerifyReport {
  std::vector<VerifyLine> lines;
  // A line comparing got with ref (host tensors): it passes when the shapes match and rel-L2 <= tol.
  void add(const std::string& what, const Tensor& got, const Tensor& ref, double tol);
  // A line for a check that holds or not: rel-L2 and max 0 when it holds, 1 when not; tolerance 0.
  void add_exact(const std::string& what, bool ok);
  bool pass() const;
  // Prints the table and the final PASS/FAIL line.
  void print(std::FILE* out) const;
};

bool looks_like_dit_golden(const SafeTensors& f);
VerifyReport verify_dit_file(const SafeTensors& f, const VerifyOptions& opt);
// The case names in a DiT golden file ("" when the file's keys carry no case prefix).
std::vector<std::string> dit_golden_cases(const SafeTensors& f);
// Loads one case's inputs.
DitInputs dit_golden_inputs(const SafeTensors& f, const std::string& case_name);
// The reference's own bf16 error (rel-L2 to f64) of one case's video and audio outputs, from the file's metadata.
std::optional<std::pair<double, double>> dit_reference_bf16_error(const SafeTensors& f, const std::string& case_name);
// The weights a golden file refers to: its own "weight." tensors, or procedural weights per its metadata.
DitCheckpoint dit_golden_weights(const SafeTensors& f, const std::string& override_path);

}  // namespace h3
