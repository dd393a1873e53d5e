// DiT checkpoints: every accepted layout (golden, released, ComfyUI, diffusers folder, procedural) must yield
// the same parameters bit for bit, and every malformed checkpoint must fail with an h3::Error that names the
// key. The procedural formula is checked against arithmetic written here from shared/golden/README.md, and
// against a few values computed separately in Python.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "model/dit/checkpoint.h"
#include "model/dit/config.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using Weights = std::vector<std::pair<std::string, Tensor>>;

using h3::test::ScratchDir;

std::string golden(const char* file) {
  return std::string(H3_GOLDEN_DIR) + "/" + file;
}

#define REQUIRE_GOLDEN(path) \
  if (!fs::exists(path)) GTEST_SKIP() << "golden file missing: " << (path)

const char* const kMini = "dit-mini.safetensors";
const char* const kOfficial = "dit-mini-official-layout.safetensors";
const char* const kComfy = "dit-mini-comfy-layout.safetensors";

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The tensors of `st` whose keys start with `strip`, renamed to `add` + the rest of the key.
Weights weights_of(const SafeTensors& st, const std::string& strip = "", const std::string& add = "") {
  Weights w;
  for (const auto& k : st.keys())
    if (k.rfind(strip, 0) == 0) w.emplace_back(add + k.substr(strip.size()), st.get(k));
  return w;
}

void erase_key(Weights& w, const std::string& key) {
  auto it = std::find_if(w.begin(), w.end(), [&](const auto& p) { return p.first == key; });
  ASSERT_NE(it, w.end()) << key;
  w.erase(it);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

// Writes `w` as shards of about equal size plus an index mapping every key to its shard.
void write_sharded(const fs::path& dir, const Weights& w, const std::string& stem, const std::string& index_name,
                   int shards) {
  nlohmann::json weight_map = nlohmann::json::object();
  size_t total = 0;
  for (int s = 0; s < shards; ++s) {
    char name[128];
    std::snprintf(name, sizeof(name), "%s-%05d-of-%05d.safetensors", stem.c_str(), s + 1, shards);
    Weights part;
    for (size_t i = w.size() * s / shards; i < w.size() * (s + 1) / shards; ++i) {
      part.push_back(w[i]);
      weight_map[w[i].first] = name;
      total += w[i].second.nbytes();
    }
    write_safetensors((dir / name).string(), part);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text(dir / index_name, index.dump(2));
}

// Compares every parameter of `ck` with `ref`; returns the number of differing tensors (naming the first
// few).
int count_differences(const DitCheckpoint& ref, const DitCheckpoint& ck) {
  int bad = 0;
  for (const auto& [key, shape] : ref.config().parameters()) {
    Tensor a = ref.get(key), b = ck.get(key);
    if (a.shape() != shape || !same_bytes(a, b)) {
      if (bad++ < 5) ADD_FAILURE() << ck.path() << ": '" << key << "' differs (" << b.describe() << ")";
    }
  }
  return bad;
}

// `ck` holds the model of `ref` again: the same config and every parameter bitwise.
void expect_same_model(const DitCheckpoint& ref, const DitCheckpoint& ck) {
  EXPECT_EQ(ck.config(), ref.config());
  EXPECT_EQ(count_differences(ref, ck), 0);
}

// Opens `path` expecting an h3::Error whose message contains every one of `needles`.
void expect_open_error(const std::string& path, const std::vector<std::string>& needles,
                       const DitCheckpointOptions& opt = {}) {
  try {
    DitCheckpoint::open(path, opt);
    ADD_FAILURE() << "opened without error: " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-h3 exception (" << typeid(e).name() << "): " << e.what();
  }
}

std::string golden_config_text() {
  return SafeTensors::open(golden(kMini)).meta("config");
}

// A single diffusers-named file with the golden weights (after `edit`) and the golden config in its metadata.
std::string write_diffusers_file(const ScratchDir& dir, const std::string& leaf, void (*edit)(Weights&)) {
  SafeTensors st = SafeTensors::open(golden(kMini));
  Weights w = weights_of(st, "weight.");
  if (edit) edit(w);
  const std::string path = (dir / leaf).string();
  write_safetensors(path, w, {{"config", st.meta("config")}});
  return path;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// The three golden weight files

TEST(CheckpointGolden, ThreeLayoutsLoadIdentically) {
  for (const char* f : {kMini, kOfficial, kComfy}) REQUIRE_GOLDEN(golden(f));
  const DitCheckpoint g = DitCheckpoint::open(golden(kMini));
  const DitCheckpoint o = DitCheckpoint::open(golden(kOfficial));
  const DitCheckpoint c = DitCheckpoint::open(golden(kComfy));
  EXPECT_EQ(g.layout(), DitLayout::golden) << g.detection_summary();
  EXPECT_EQ(o.layout(), DitLayout::official) << o.detection_summary();
  EXPECT_EQ(o.qkv_order(), QkvOrder::interleaved);
  EXPECT_EQ(c.layout(), DitLayout::comfy) << c.detection_summary();
  EXPECT_EQ(c.qkv_order(), QkvOrder::blocked);
  EXPECT_EQ(g.config(), o.config());
  EXPECT_EQ(g.config(), c.config());
  EXPECT_EQ(g.config(), *DitConfig::named("mini"));
  EXPECT_EQ(g.config_source(), "file metadata 'config'");

  const auto params = g.config().parameters();
  EXPECT_EQ(params.size(), 10u + 10u * 2 + 1 + 12u * 3 + 7);
  for (const auto& [key, shape] : params) {
    Tensor t = g.get(key);
    EXPECT_EQ(t.shape(), shape) << key;
    EXPECT_EQ(t.dtype(), DType::f32) << key;
    EXPECT_EQ(g.stored_dtype(key), DType::f32) << key;
  }
  EXPECT_EQ(count_differences(g, o), 0);
  EXPECT_EQ(count_differences(g, c), 0);
  const size_t bytes = 4 * static_cast<size_t>(g.config().parameter_count());
  EXPECT_EQ(g.stored_bytes(), bytes);
  EXPECT_EQ(o.stored_bytes(), bytes);
  EXPECT_EQ(c.stored_bytes(), bytes);
  EXPECT_EQ(g.dtype_counts(), (std::map<DType, int64_t>{{DType::f32, static_cast<int64_t>(params.size())}}));
  EXPECT_THROW(g.get("transformer_blocks.9.norm1.weight"), Error);
  EXPECT_THROW(o.stored_dtype("blocks.0.attn.qkv_proj.weight"), Error);  // only diffusers names are served
}

// The packed layouts themselves, checked on the raw files with the index equations (independent of the
// loader):
//   official qkv row h*3D + p*D + d  ==  comfy qkv row p*I + h*D + d  ==  to_{q,k,v}[p] row h*D + d
//   fc1 rows [0, F) (gate) == ff.net.0.proj rows [F, 2F);  fc1 rows [F, 2F) (value) == ff.net.0.proj rows [0,
//   F)
TEST(CheckpointGolden, PackedLayoutsFollowTheirIndexEquations) {
  for (const char* f : {kMini, kOfficial, kComfy}) REQUIRE_GOLDEN(golden(f));
  const SafeTensors dm = SafeTensors::open(golden(kMini));
  const SafeTensors off = SafeTensors::open(golden(kOfficial));
  const SafeTensors cf = SafeTensors::open(golden(kComfy));
  const DitConfig cfg = *DitConfig::named("mini");
  const int64_t D = cfg.attention_head_dim, I = cfg.inner_dim(), Hd = cfg.hidden_size, F = cfg.ffn_dim;
  const size_t row = static_cast<size_t>(Hd) * 4;
  std::vector<std::pair<std::string, std::string>> blocks;  // (official prefix, diffusers prefix)
  for (int n = 0; n < cfg.num_layers; ++n)
    blocks.emplace_back("blocks." + std::to_string(n) + ".", "weight.transformer_blocks." + std::to_string(n) + ".");
  for (int n = 0; n < cfg.num_refiner_layers; ++n)
    blocks.emplace_back("token_refiner.blocks." + std::to_string(n) + ".",
                        "weight.token_refiner.refiner_blocks." + std::to_string(n) + ".");
  int bad = 0;
  for (const auto& [o, d] : blocks) {
    const auto* inter = static_cast<const std::byte*>(off.get(o + "attn.qkv_proj.weight").raw());
    const auto* blocked = static_cast<const std::byte*>(cf.get(o + "attn.qkv_proj.weight").raw());
    const char* part_names[3] = {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"};
    for (int64_t p = 0; p < 3; ++p) {
      const auto* part = static_cast<const std::byte*>(dm.get(d + part_names[p]).raw());
      for (int64_t h = 0; h < cfg.num_attention_heads; ++h)
        for (int64_t c = 0; c < D; ++c) {
          const std::byte* want = part + (h * D + c) * row;
          if (std::memcmp(inter + (h * 3 * D + p * D + c) * row, want, row) != 0) ++bad;
          if (std::memcmp(blocked + (p * I + h * D + c) * row, want, row) != 0) ++bad;
        }
    }
    const auto* fc1 = static_cast<const std::byte*>(off.get(o + "mlp.fc1.weight").raw());
    const auto* fc1c = static_cast<const std::byte*>(cf.get(o + "mlp.fc1.weight").raw());
    const auto* proj = static_cast<const std::byte*>(dm.get(d + "ff.net.0.proj.weight").raw());
    const size_t half = static_cast<size_t>(F) * row;
    if (std::memcmp(fc1, proj + half, half) != 0 || std::memcmp(fc1 + half, proj, half) != 0) ++bad;
    if (std::memcmp(fc1c, fc1, 2 * half) != 0) ++bad;
  }
  EXPECT_EQ(bad, 0);
  // The two qkv orders really differ, so agreement above is not vacuous.
  EXPECT_FALSE(same_bytes(off.get("blocks.0.attn.qkv_proj.weight"), cf.get("blocks.0.attn.qkv_proj.weight")));
}

// ---------------------------------------------------------------------------------------------------------------
// Folders and single files built here from the golden weights

TEST(CheckpointDiffusers, ShardedFolderWithIndex) {
  REQUIRE_GOLDEN(golden(kMini));
  ScratchDir dir;
  const DitCheckpoint ref = DitCheckpoint::open(golden(kMini));
  const fs::path repo = dir / "repo", folder = repo / "transformer";
  fs::create_directories(folder);
  SafeTensors st = SafeTensors::open(golden(kMini));
  write_sharded(folder, weights_of(st, "weight."), "diffusion_pytorch_model",
                "diffusion_pytorch_model.safetensors.index.json", 2);
  write_text(folder / "config.json", ref.config().to_json_text());
  EXPECT_TRUE(fs::exists(folder / "diffusion_pytorch_model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(folder / "diffusion_pytorch_model-00002-of-00002.safetensors"));

  // The transformer folder itself, and the pipeline repo above it.
  for (const fs::path& p : {folder, repo}) {
    SCOPED_TRACE(p.string());
    const DitCheckpoint ck = DitCheckpoint::open(p.string());
    EXPECT_EQ(ck.layout(), DitLayout::diffusers) << ck.detection_summary();
    EXPECT_EQ(ck.files().size(), 2u);
    EXPECT_EQ(ck.config(), ref.config());
    EXPECT_NE(ck.config_source().find("config.json"), std::string::npos) << ck.config_source();
    EXPECT_EQ(count_differences(ref, ck), 0);
    EXPECT_EQ(ck.stored_bytes(), ref.stored_bytes());
  }
}

TEST(CheckpointDiffusers, ShardsWithoutIndex) {
  REQUIRE_GOLDEN(golden(kMini));
  ScratchDir dir;
  const DitCheckpoint ref = DitCheckpoint::open(golden(kMini));
  SafeTensors st = SafeTensors::open(golden(kMini));
  write_sharded(dir.path(), weights_of(st, "weight."), "diffusion_pytorch_model", "unused.json", 3);
  fs::remove(dir / "unused.json");
  write_text(dir / "config.json", ref.config().to_json_text());
  const DitCheckpoint ck = DitCheckpoint::open(dir.path().string());
  EXPECT_EQ(ck.layout(), DitLayout::diffusers);
  EXPECT_EQ(ck.files().size(), 3u);
  EXPECT_EQ(count_differences(ref, ck), 0);
}

TEST(CheckpointOfficial, ReleasedFolder) {
  for (const char* f : {kMini, kOfficial}) REQUIRE_GOLDEN(golden(f));
  ScratchDir dir;
  const DitCheckpoint ref = DitCheckpoint::open(golden(kMini));
  SafeTensors off = SafeTensors::open(golden(kOfficial));
  Weights w = weights_of(off);
  // The released files carry the rotary inverse frequencies; the loader recomputes them from the config.
  w.insert(w.begin(), std::make_pair(std::string("rope.inv_freq"), Tensor(DType::f32, {4})));
  write_sharded(dir.path(), w, "model", "model.safetensors.index.json", 2);
  const nlohmann::json released_config = {
      {"num_attention_heads", 14}, {"attention_head_dim", 32},      {"hidden_size", 96},
      {"num_layers", 3},           {"token_refiner_num_layers", 2}, {"ffn_hidden_size", 160},
      {"latents_dim", 24},         {"audio_latents_dim", 32},       {"text_dim", 64},
      {"timestep_input_dim", 32},  {"time_embed_hidden_size", 96},  {"time_embed_dim", 48},
      {"rope_inv_freq_len", 4},    {"rope_theta", 10000.0},         {"patch_size", {1, 2, 2}}};
  write_text(dir / "config.json", released_config.dump(2));

  const DitCheckpoint ck = DitCheckpoint::open(dir.path().string());
  EXPECT_EQ(ck.layout(), DitLayout::official) << ck.detection_summary();
  EXPECT_EQ(ck.qkv_order(), QkvOrder::interleaved);
  EXPECT_EQ(ck.files().size(), 2u);
  expect_same_model(ref, ck);
}

TEST(CheckpointComfy, PrefixedSingleFile) {
  for (const char* f : {kMini, kComfy}) REQUIRE_GOLDEN(golden(f));
  ScratchDir dir;
  const DitCheckpoint ref = DitCheckpoint::open(golden(kMini));
  SafeTensors cf = SafeTensors::open(golden(kComfy));
  const Weights w = weights_of(cf, "", "model.diffusion_model.");

  const std::string with_config = (dir / "with-config.safetensors").string();
  write_safetensors(with_config, w, {{"config", cf.meta("config")}, {"format", "pt"}});
  const DitCheckpoint ck = DitCheckpoint::open(with_config);
  EXPECT_EQ(ck.layout(), DitLayout::comfy) << ck.detection_summary();
  EXPECT_EQ(ck.qkv_order(), QkvOrder::blocked);
  expect_same_model(ref, ck);

  // Without any metadata the config comes from the shapes (rope_freq_dim cannot be seen there).
  const std::string bare = (dir / "bare.safetensors").string();
  write_safetensors(bare, w);
  const DitCheckpoint inferred = DitCheckpoint::open(bare);
  EXPECT_EQ(inferred.layout(), DitLayout::comfy);
  DitConfig expect = ref.config();
  expect.rope_freq_dim = inferred.config().rope_freq_dim;
  EXPECT_EQ(inferred.config(), expect);
  EXPECT_EQ(count_differences(ref, inferred), 0);
}

TEST(CheckpointOfficial, QkvLayoutOptionResolvesAnUnknownOrder) {
  for (const char* f : {kMini, kOfficial, kComfy}) REQUIRE_GOLDEN(golden(f));
  ScratchDir dir;
  const DitCheckpoint ref = DitCheckpoint::open(golden(kMini));
  const std::string config = golden_config_text();
  struct Source {
    const char* file;
    QkvOrder order;
    DitLayout layout;
  };
  for (const Source& s : {Source{kOfficial, QkvOrder::interleaved, DitLayout::official},
                          Source{kComfy, QkvOrder::blocked, DitLayout::comfy}}) {
    SCOPED_TRACE(s.file);
    SafeTensors st = SafeTensors::open(golden(s.file));
    const Weights w = weights_of(st);
    // No metadata, and metadata that is more than a lone 'config': nothing says how qkv is ordered.
    const std::string none = (dir / (std::string("none-") + s.file)).string();
    const std::string other = (dir / (std::string("other-") + s.file)).string();
    write_safetensors(none, w);
    write_safetensors(other, w, {{"config", config}, {"format", "pt"}});
    for (const std::string& p : {none, other}) {
      expect_open_error(p, {p, "--qkv-layout"});
      const DitCheckpoint ck = DitCheckpoint::open(p, DitCheckpointOptions{s.order});
      EXPECT_EQ(ck.layout(), s.layout);
      EXPECT_EQ(ck.qkv_order(), s.order);
      EXPECT_NE(ck.detection_summary().find("--qkv-layout"), std::string::npos) << ck.detection_summary();
      EXPECT_EQ(count_differences(ref, ck), 0);
    }
    // A lone 'config' entry is the Comfy-Org repack: blocked.
    const std::string lone = (dir / (std::string("lone-") + s.file)).string();
    write_safetensors(lone, w, {{"config", config}});
    EXPECT_EQ(DitCheckpoint::open(lone).qkv_order(), QkvOrder::blocked);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Errors

TEST(CheckpointErrors, MissingUnexpectedAndMisshapedKeys) {
  REQUIRE_GOLDEN(golden(kMini));
  ScratchDir dir;
  const std::string missing = write_diffusers_file(
      dir, "missing.safetensors", [](Weights& w) { erase_key(w, "transformer_blocks.1.attn.to_k.weight"); });
  expect_open_error(missing, {missing, "missing", "transformer_blocks.1.attn.to_k.weight"});

  const std::string extra = write_diffusers_file(dir, "extra.safetensors", [](Weights& w) {
    w.emplace_back("transformer_blocks.0.attn.extra.weight", Tensor(DType::f32, {3}));
  });
  expect_open_error(extra, {extra, "unexpected", "transformer_blocks.0.attn.extra.weight"});

  const std::string shape = write_diffusers_file(dir, "shape.safetensors", [](Weights& w) {
    erase_key(w, "proj_in.bias");
    w.emplace_back("proj_in.bias", Tensor(DType::f32, {95}));
  });
  expect_open_error(shape, {shape, "wrong shape", "proj_in.bias", "[95]"});
}

TEST(CheckpointErrors, MissingOrMisshapedFusedQkv) {
  REQUIRE_GOLDEN(golden(kOfficial));
  ScratchDir dir;
  SafeTensors off = SafeTensors::open(golden(kOfficial));
  Weights w = weights_of(off);
  erase_key(w, "blocks.2.attn.qkv_proj.weight");
  const std::string p = (dir / "no-qkv.safetensors").string();
  write_safetensors(p, w, off.metadata());
  expect_open_error(p, {p, "missing", "transformer_blocks.2.attn.to_q.weight"});

  w.emplace_back("blocks.2.attn.qkv_proj.weight", Tensor(DType::f32, {1343, 96}));
  const std::string q = (dir / "bad-qkv.safetensors").string();
  write_safetensors(q, w, off.metadata());
  expect_open_error(q, {q, "blocks.2.attn.qkv_proj.weight"});
}

TEST(CheckpointErrors, BadIndex) {
  REQUIRE_GOLDEN(golden(kMini));
  ScratchDir dir;
  SafeTensors st = SafeTensors::open(golden(kMini));
  const Weights w = weights_of(st, "weight.");
  const std::string config = DitCheckpoint::open(golden(kMini)).config().to_json_text();
  // One real shard next to a file outside the folder, so only the index check can stop the '..' case.
  write_safetensors((dir / "outside.safetensors").string(), {});
  struct Case {
    const char* what;
    std::string shard;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"missing shard", "diffusion_pytorch_model-00002-of-00002.safetensors", "is missing"},
      {"parent path", "../outside.safetensors", "../outside.safetensors"},
      {"sub-folder", "sub/diffusion_pytorch_model.safetensors", "sub/diffusion_pytorch_model.safetensors"},
      {"absolute", "/etc/passwd", "/etc/passwd"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path folder = dir / ("case" + std::to_string(i++));
    fs::create_directories(folder / "sub");
    write_safetensors((folder / "diffusion_pytorch_model-00001-of-00002.safetensors").string(), w);
    write_safetensors((folder / "sub" / "diffusion_pytorch_model.safetensors").string(), {});
    write_text(folder / "config.json", config);
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [k, t] : w) map[k] = "diffusion_pytorch_model-00001-of-00002.safetensors";
    map["proj_out.bias"] = c.shard;
    write_text(folder / "diffusion_pytorch_model.safetensors.index.json", nlohmann::json({{"weight_map", map}}).dump());
    expect_open_error(folder.string(), {c.needle, "index.json"});
  }
  // An index that is not JSON, or has no weight_map.
  for (const std::string& text : {std::string("{\"weight_map\": "), std::string("{\"metadata\": {}}"),
                                  std::string("{\"weight_map\": {\"a\": 3}}")}) {
    SCOPED_TRACE(text);
    const fs::path folder = dir / ("index" + std::to_string(i++));
    fs::create_directories(folder);
    write_safetensors((folder / "model.safetensors").string(), w);
    write_text(folder / "model.safetensors.index.json", text);
    expect_open_error(folder.string(), {"index.json"});
  }
}

TEST(CheckpointErrors, QuantScaleOnAFloatWeightIsRefused) {
  REQUIRE_GOLDEN(golden(kOfficial));
  ScratchDir dir;
  SafeTensors off = SafeTensors::open(golden(kOfficial));
  Weights w = weights_of(off);
  w.emplace_back("blocks.0.attn.qkv_proj.weight_scale", Tensor(DType::f32, {1}));
  const std::string p = (dir / "fp8.safetensors").string();
  write_safetensors(p, w, off.metadata());
  expect_open_error(p, {p, "blocks.0.attn.qkv_proj.weight_scale", "expected F8_E4M3 or I8"});
}

TEST(CheckpointErrors, NotACheckpoint) {
  ScratchDir dir;
  const std::string nowhere = (dir / "no-such-checkpoint.safetensors").string();
  expect_open_error(nowhere, {nowhere, "no such file"});
  expect_open_error((dir / "empty").string() + "/", {});
  fs::create_directories(dir / "empty");
  expect_open_error((dir / "empty").string(), {(dir / "empty").string(), "no .safetensors"});

  const std::string other = (dir / "other.safetensors").string();
  write_safetensors(other, {{"encoder.conv.weight", Tensor(DType::f32, {2, 2})}});
  expect_open_error(other, {other, "no DiT parameters"});

  const std::string mixed = (dir / "mixed.safetensors").string();
  write_safetensors(
      mixed, {{"proj_in.weight", Tensor(DType::f32, {2, 2})}, {"blocks.0.norm1.weight", Tensor(DType::f32, {2})}});
  expect_open_error(mixed, {mixed, "mixes"});

  const std::string not_st = (dir / "text.safetensors").string();
  write_text(not_st, "this is not a safetensors file at all");
  expect_open_error(not_st, {not_st});
}

TEST(CheckpointErrors, PrefixedFileWithAnUnprefixedShortKey) {
  // A ComfyUI file with one key outside the "model.diffusion_model." prefix that is shorter than the prefix
  // must be reported as unexpected, like a longer one.
  REQUIRE_GOLDEN(golden(kComfy));
  ScratchDir dir;
  SafeTensors cf = SafeTensors::open(golden(kComfy));
  for (const char* stray : {"model.other.extra_tensor_name", "rope.inv_freq"}) {
    SCOPED_TRACE(stray);
    Weights w = weights_of(cf, "", "model.diffusion_model.");
    w.emplace_back(stray, Tensor(DType::f32, {4}));
    const std::string p = (dir / (std::string(stray) + ".safetensors")).string();
    write_safetensors(p, w, {{"config", cf.meta("config")}});
    expect_open_error(p, {p, "unexpected", stray});
  }
}

TEST(CheckpointErrorsDeathTest, InferredConfigFromDegenerateShapesDoesNotCrash) {
  // No config anywhere, so it is inferred from the shapes; a zero-length q norm makes the head size 0.
  REQUIRE_GOLDEN(golden(kMini));
  ScratchDir dir;
  SafeTensors st = SafeTensors::open(golden(kMini));
  Weights w = weights_of(st, "weight.");
  erase_key(w, "transformer_blocks.0.attn.norm_q.weight");
  w.emplace_back("transformer_blocks.0.attn.norm_q.weight", Tensor(DType::f32, {0}));
  const std::string p = (dir / "zero-head.safetensors").string();
  write_safetensors(p, w);
  EXPECT_EXIT(
      {
        try {
          DitCheckpoint::open(p);
        } catch (const Error&) {
          std::_Exit(0);
        } catch (...) {
          std::_Exit(2);
        }
        std::_Exit(1);
      },
      testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------------------------
// Procedural weights

namespace {

// The README's definitions, written independently of src/io/procedural.cpp: byte-wise FNV-1a over a
// string_view with the constants in decimal, and splitmix64 as three separate mixing steps.
uint64_t fnv1a64_ref(std::string_view s) {
  uint64_t h = 14695981039346656037ull;  // 0xcbf29ce484222325
  for (size_t i = 0; i < s.size(); ++i) {
    h = h ^ static_cast<uint64_t>(static_cast<unsigned char>(s[i]));
    h = h * 1099511628211ull;  // 0x100000001b3
  }
  return h;
}

uint64_t mix_ref(uint64_t state) {
  const uint64_t z0 = state + 0x9E3779B97F4A7C15ull;
  const uint64_t z1 = (z0 ^ (z0 >> 30)) * 0xBF58476D1CE4E5B9ull;
  const uint64_t z2 = (z1 ^ (z1 >> 27)) * 0x94D049BB133111EBull;
  return z2 ^ (z2 >> 31);
}

float procedural_ref(std::string_view name, const Shape& shape, uint64_t seed, uint64_t i) {
  const uint64_t r = mix_ref((seed ^ fnv1a64_ref(name)) + i);
  const double u = std::ldexp(static_cast<double>(r >> 11), -53) * 2.0 - 1.0;
  double v;
  if (shape.size() >= 2) {
    double fan_in = 1.0;
    for (size_t d = 1; d < shape.size(); ++d) fan_in *= static_cast<double>(shape[d]);
    v = u * std::sqrt(3.0 / fan_in);
  } else if (name.find("norm") != std::string_view::npos) {
    v = 1.0 + 0.1 * u;
  } else {
    v = 0.05 * u;
  }
  return static_cast<float>(v);
}

// Number of elements of `t` that differ from the reference formula.
int64_t mismatches(const Tensor& t, const std::string& name, const Shape& shape, uint64_t seed) {
  int64_t bad = 0;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != procedural_ref(name, shape, seed, static_cast<uint64_t>(i))) ++bad;
  return bad;
}

}  // namespace

TEST(CheckpointProcedural, ReferenceArithmeticMatchesKnownVectors) {
  // Published FNV-1a 64 and SplitMix64 test vectors, so the reference above is itself checked.
  EXPECT_EQ(fnv1a64_ref(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64_ref("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64_ref("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(mix_ref(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(mix_ref(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(mix_ref(0x3c6ef372fe94f82aull), 0x06c45d188009454full);
  // ... and the library's own helpers agree.
  for (const char* s : {"", "a", "foobar", "transformer_blocks.0.attn.to_q.weight"})
    EXPECT_EQ(fnv1a(s), fnv1a64_ref(s)) << s;
  for (uint64_t z : {0ull, 1ull, 20261129ull, 0xffffffffffffffffull}) EXPECT_EQ(splitmix64(z), mix_ref(z)) << z;
}

TEST(CheckpointProcedural, HashVariantsFollowTheirDefinitions) {
  // core/hash.h's record digest: each string with its NUL, in turn.
  Fnv1a rec;
  rec.str("ab");
  rec.str("c");
  EXPECT_EQ(rec.h, fnv1a64_ref(std::string_view("ab\0c\0", 5)));
  double v = 1.5;
  Fnv1a num;
  num.f64(v);
  EXPECT_EQ(num.h, fnv1a64_ref(std::string_view(reinterpret_cast<const char*>(&v), sizeof(v))));
  // The word-wise variant: whole 8-byte words in host order, then the tail byte-wise.
  const std::string s = "abcdefghi";
  uint64_t w = 0;
  for (int k = 0; k < 8; ++k) {
    const int shift = std::endian::native == std::endian::little ? 8 * k : 8 * (7 - k);
    w |= static_cast<uint64_t>(static_cast<unsigned char>(s[k])) << shift;
  }
  const uint64_t want =
      ((14695981039346656037ull ^ w) * 1099511628211ull ^ static_cast<uint64_t>('i')) * 1099511628211ull;
  EXPECT_EQ(fnv1a_words(s.data(), s.size()), want);
  EXPECT_EQ(fnv1a_words("abc", 3), fnv1a64_ref("abc"));  // shorter than a word: byte-wise
}

TEST(CheckpointProcedural, ValuesComputedOutsideTheEngine) {
  // Computed with Python's arbitrary-precision ints and floats from the README formula, rounded to f32.
  const uint64_t seed = kDefaultProceduralSeed;
  const Shape mini_proj = {96, 96};
  Tensor w = procedural_tensor("proj_in.weight", mini_proj, seed);
  EXPECT_EQ(w.data<float>()[0], 0x1.e0de36p-4f);
  EXPECT_EQ(w.data<float>()[1], -0x1.3ff196p-3f);
  EXPECT_EQ(w.data<float>()[9215], 0x1.4da098p-3f);
  Tensor n = procedural_tensor("transformer_blocks.0.norm1.weight", {96}, seed);
  EXPECT_EQ(n.data<float>()[0], 0x1.0d1c50p+0f);
  EXPECT_EQ(n.data<float>()[95], 0x1.15f568p+0f);
  Tensor b = procedural_tensor("proj_in.bias", {96}, seed);
  EXPECT_EQ(b.data<float>()[0], 0x1.1d1efap-6f);
  EXPECT_EQ(b.data<float>()[7], 0x1.813976p-5f);
  // Full width (fan_in 5376): the values depend on name, index and fan_in only, so two rows suffice.
  Tensor q = procedural_tensor("transformer_blocks.0.attn.to_q.weight", {2, 5376}, seed);
  EXPECT_EQ(q.data<float>()[0], 0x1.06813cp-6f);
  EXPECT_EQ(procedural_ref("transformer_blocks.0.attn.to_q.weight", {7168, 5376}, seed, 38535167), 0x1.4420f4p-7f);
  EXPECT_EQ(procedural_tensor("proj_in.weight", mini_proj, 7).data<float>()[0], 0x1.e1a302p-7f);
}

TEST(CheckpointProcedural, RulesForEachRank) {
  const uint64_t seed = 12345;
  struct Case {
    std::string name;
    Shape shape;
    double lo, hi;  // the range the rule allows
  };
  const std::vector<Case> cases = {
      {"x.weight", {7, 3, 5}, -std::sqrt(3.0 / 15), std::sqrt(3.0 / 15)},  // fan_in = 3 * 5
      {"y.weight", {5, 11}, -std::sqrt(3.0 / 11), std::sqrt(3.0 / 11)},
      {"attn.norm_q.weight", {33}, 0.9, 1.1},
      {"token_refiner.final_norm.weight", {17}, 0.9, 1.1},
      {"norm_out.linear.weight", {6, 9}, -std::sqrt(3.0 / 9), std::sqrt(3.0 / 9)},  // "norm" but a matrix
      {"proj_in.bias", {33}, -0.05, 0.05},
      {"empty.weight", {0, 4}, 0, 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor t = procedural_tensor(c.name, c.shape, seed);
    ASSERT_EQ(t.dtype(), DType::f32);
    ASSERT_EQ(t.shape(), c.shape);
    EXPECT_EQ(mismatches(t, c.name, c.shape, seed), 0);
    double sum = 0;
    for (float v : t.span<float>()) {
      EXPECT_GE(v, c.lo - 1e-6);  // the f32 rounding may step just outside the f64 bound
      EXPECT_LE(v, c.hi + 1e-6);
      sum += v;
    }
    if (t.numel() > 0 && c.lo == 0.9) {
      EXPECT_NEAR(sum / t.numel(), 1.0, 0.05);
    }
  }
  // The same index under another name or seed gives another value.
  EXPECT_NE(procedural_tensor("a.weight", {4, 4}, seed).data<float>()[0],
            procedural_tensor("b.weight", {4, 4}, seed).data<float>()[0]);
  // A large tensor crosses the parallel split (1 << 16 elements) and must still follow the row-major formula.
  Tensor big = procedural_tensor("big.weight", {301, 701}, seed);
  EXPECT_EQ(mismatches(big, "big.weight", {301, 701}, seed), 0);
}

TEST(CheckpointProcedural, MiniEveryParameterFollowsTheFormula) {
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  EXPECT_EQ(ck.layout(), DitLayout::procedural);
  EXPECT_EQ(ck.seed(), kDefaultProceduralSeed);
  EXPECT_EQ(ck.config(), *DitConfig::named("mini"));
  EXPECT_TRUE(ck.files().empty());
  int64_t bad = 0;
  for (const auto& [key, shape] : ck.config().parameters()) {
    Tensor t = ck.get(key);
    ASSERT_EQ(t.shape(), shape) << key;
    ASSERT_EQ(ck.stored_dtype(key), DType::f32);
    const int64_t m = mismatches(t, key, shape, ck.seed());
    EXPECT_EQ(m, 0) << key;
    bad += m;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(ck.stored_bytes(), 4 * static_cast<size_t>(ck.config().parameter_count()));
}

TEST(CheckpointProcedural, OpensWithoutGeneratingData) {
  const auto t0 = std::chrono::steady_clock::now();
  const DitCheckpoint full = DitCheckpoint::open("procedural:full");
  const DitCheckpoint one = DitCheckpoint::open("procedural:fullwidth-1block");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0) << "opening a procedural checkpoint must not generate its 132 GB";

  EXPECT_EQ(full.config(), *DitConfig::named("full"));
  const int64_t n = full.config().parameter_count();
  EXPECT_GT(n, 32'000'000'000);
  EXPECT_LT(n, 34'000'000'000);
  EXPECT_EQ(full.stored_bytes(), 4 * static_cast<size_t>(n));
  EXPECT_EQ(full.dtype_counts(),
            (std::map<DType, int64_t>{{DType::f32, static_cast<int64_t>(full.config().parameters().size())}}));
  EXPECT_EQ(full.stored_dtype("transformer_blocks.49.ff.net.0.proj.weight"), DType::f32);
  EXPECT_THROW(full.stored_dtype("transformer_blocks.50.norm1.weight"), Error);

  EXPECT_EQ(one.config().num_layers, 1);
  EXPECT_EQ(one.config().num_refiner_layers, 1);
  EXPECT_EQ(one.config().hidden_size, 5376);
  // Small tensors of the full-width model only (the big ones are hundreds of MB each).
  for (const char* key : {"proj_in.bias", "transformer_blocks.0.attn.norm_q.weight", "proj_out.weight"}) {
    Shape shape;
    for (const auto& [k, s] : one.config().parameters())
      if (k == key) shape = s;
    ASSERT_FALSE(shape.empty()) << key;
    EXPECT_EQ(mismatches(one.get(key), key, shape, kDefaultProceduralSeed), 0) << key;
  }
}

TEST(CheckpointProcedural, SeedChangesEveryTensor) {
  const DitCheckpoint a = DitCheckpoint::open("procedural:mini");
  const DitCheckpoint b = DitCheckpoint::open("procedural:mini:seed=7");
  const DitCheckpoint c = DitCheckpoint::open("procedural:mini:seed=20261129");
  EXPECT_EQ(b.seed(), 7u);
  EXPECT_EQ(c.seed(), kDefaultProceduralSeed);
  EXPECT_EQ(a.config(), b.config());
  for (const char* key : {"proj_in.weight", "transformer_blocks.2.norm2.weight", "proj_out.bias"}) {
    EXPECT_FALSE(same_bytes(a.get(key), b.get(key))) << key;
    EXPECT_TRUE(same_bytes(a.get(key), c.get(key))) << key;
  }
  EXPECT_EQ(mismatches(b.get("proj_in.weight"), "proj_in.weight", {96, 96}, 7), 0);
  const DitCheckpoint big = DitCheckpoint::open("procedural:mini:seed=18446744073709551615");
  EXPECT_EQ(big.seed(), 18446744073709551615ull);
}

TEST(CheckpointProcedural, BadNamesAndSeedsThrow) {
  for (const char* spec :
       {"procedural:", "procedural:tiny", "procedural:Mini", "procedural:mini:", "procedural:full ",
        "procedural:mini:seed=", "procedural:mini:seed=abc", "procedural:mini:seed=7x", "procedural:mini:seed=0x10",
        "procedural:mini:seed=1.5", "procedural:mini:seed=18446744073709551616", "procedural:mini:seed=7:seed=8",
        "procedural:mini;seed=7"}) {
    SCOPED_TRACE(spec);
    expect_open_error(spec, {spec});
  }
}

TEST(CheckpointProcedural, NegativeSeedIsRejected) {
  // "seed=-1" is not a non-negative integer; std::stoull would quietly wrap it to 2^64 - 1.
  expect_open_error("procedural:mini:seed=-1", {"-1"});
  expect_open_error("procedural:mini:seed= 7", {"seed"});
}

// Released tensor names are read by hand: a 40,000-character name sent `h3 info` off the stack through a `(.+)$`
// regular expression.
TEST(CheckpointOfficial, NamesOfAnyLengthAreReadByHand) {
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks.7.norm1.weight"), "transformer_blocks.7.norm1.weight");
  EXPECT_EQ(h3::dit_official_to_diffusers("token_refiner.blocks.1.norm2.weight"),
            "token_refiner.refiner_blocks.1.norm2.weight");
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks..norm1.weight"), "");
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks.7."), "");
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks.7.norm1.weightx"), "");
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks.7." + std::string(40000, 'a')), "");
  EXPECT_EQ(h3::dit_official_to_diffusers("blocks." + std::string(1000000, '7') + ".x"), "");
}
