// LoRA files of every accepted layout, written here from small random tensors, loaded against the procedural
// mini DiT and checked against the merge computed independently in this file (h3-model-spec §9).
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/dit/export.h"
#include "model/dit/lora.h"
#include "pipeline/noise.h"
#include "pipeline/synthetic.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using h3::test::ScratchDir;

using Weights = std::vector<std::pair<std::string, Tensor>>;

DitCheckpoint mini() {
  return DitCheckpoint::open("procedural:mini");
}

// Float value of element (i, j) of a 2-D tensor.
double at(const Tensor& t, int64_t i, int64_t j) {
  return t.get(i * t.dim(1) + j);
}

// Expected W + s * B * A for one row, computed in long double here (independent of the engine's loop).
void expect_merged(const Tensor& got, const Tensor& base, const Tensor& B, const Tensor& A, double s,
                   const std::function<int64_t(int64_t)>& b_row, const std::string& what) {
  ASSERT_EQ(got.shape(), base.shape()) << what;
  double worst = 0;
  for (int64_t i = 0; i < base.dim(0); ++i)
    for (int64_t j = 0; j < base.dim(1); ++j) {
      long double d = 0;
      for (int64_t r = 0; r < A.dim(0); ++r) d += static_cast<long double>(at(B, b_row(i), r)) * at(A, r, j);
      const double want = at(base, i, j) + s * static_cast<double>(d);
      worst = std::max(worst, std::fabs(at(got, i, j) - want) / (std::fabs(want) + 1e-3));
    }
  EXPECT_LT(worst, 1e-6) << what;
}

const DitConfig kMini = *DitConfig::named("mini");
const int64_t kH = kMini.hidden_size, kI = kMini.inner_dim(), kF = kMini.ffn_dim, kD = kMini.attention_head_dim;

}  // namespace

// Every layout: qkv (thirds), fc1 (halves swapped), out_proj, adaln, a standalone projection.
TEST(Lora, EveryLayoutMergesTheRightRows) {
  struct Case {
    std::string name, down, up, prefix;
    bool kohya, interleaved;
  };
  const std::vector<Case> cases = {
      {"ai-toolkit", ".lora_A.weight", ".lora_B.weight", "diffusion_model.", false, false},
      {"reference", ".lora_A.weight", ".lora_B.weight", "", false, false},
      {"kohya", ".lora_down.weight", ".lora_up.weight", "lora_unet_", true, false},
      {"peft", ".lora_A.default.weight", ".lora_B.default.weight", "", false, true},
  };
  DitCheckpoint base = mini();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ScratchDir dir;
    const int64_t rank = 3;
    struct Mod {
      std::string name;
      int64_t out, in;
    };
    const std::vector<Mod> mods = {
        {"blocks.1.attn.qkv_proj", 3 * kI, kH},     {"blocks.0.mlp.fc1", 2 * kF, kH},
        {"blocks.2.attn.out_proj", kH, kI},         {"blocks.1.adaln_proj.linear", 18 * kH, kMini.time_embed_dim},
        {"token_refiner.blocks.0.mlp.fc2", kH, kF}, {"video_patch_proj", kH, kMini.video_patch_dim()}};
    Weights w;
    std::map<std::string, std::pair<Tensor, Tensor>> ab;
    uint64_t stream = 1;
    for (const auto& m : mods) {
      Tensor A = seeded_normal({rank, m.in}, 7, stream++), B = seeded_normal({m.out, rank}, 7, stream++);
      std::string n = m.name;
      if (c.kohya)
        for (char& ch : n)
          if (ch == '.') ch = '_';
      w.emplace_back(c.prefix + n + c.down, A);
      w.emplace_back(c.prefix + n + c.up, B);
      if (c.kohya) w.emplace_back(c.prefix + n + ".alpha", Tensor::from(std::vector<float>{1.5f}, {}));
      ab[m.name] = {A, B};
    }
    const std::string path = dir / "l.safetensors";
    write_safetensors(path, w);
    DitCheckpoint ck = mini();
    const double strength = 0.7;
    ck.add_lora(path, strength);
    const LoraFile& lf = *ck.loras().at(0);
    EXPECT_EQ(lf.modules, 6);
    EXPECT_EQ(lf.qkv_interleaved, c.interleaved);
    const double s = strength * (c.kohya ? 1.5 : 3.0) / 3.0;
    // qkv thirds: blocked part p row i is B row p*I + i; interleaved: head h = i / D, channel i % D.
    const char* parts[3] = {"to_q", "to_k", "to_v"};
    for (int p = 0; p < 3; ++p) {
      const std::string key = std::string("transformer_blocks.1.attn.") + parts[p] + ".weight";
      auto row = [&](int64_t i) { return c.interleaved ? (i / kD) * 3 * kD + p * kD + i % kD : p * kI + i; };
      expect_merged(ck.get(key), base.get(key), ab["blocks.1.attn.qkv_proj"].second, ab["blocks.1.attn.qkv_proj"].first,
                    s, row, key);
    }
    // fc1: released [gate; value]; ff.net.0.proj = [value; gate].
    expect_merged(
        ck.get("transformer_blocks.0.ff.net.0.proj.weight"), base.get("transformer_blocks.0.ff.net.0.proj.weight"),
        ab["blocks.0.mlp.fc1"].second, ab["blocks.0.mlp.fc1"].first, s,
        [&](int64_t i) { return i < kF ? i + kF : i - kF; }, "fc1");
    auto same = [](int64_t i) { return i; };
    expect_merged(ck.get("transformer_blocks.2.attn.to_out.0.weight"),
                  base.get("transformer_blocks.2.attn.to_out.0.weight"), ab["blocks.2.attn.out_proj"].second,
                  ab["blocks.2.attn.out_proj"].first, s, same, "out_proj");
    expect_merged(ck.get("transformer_blocks.1.adaln_proj.linear.weight"),
                  base.get("transformer_blocks.1.adaln_proj.linear.weight"), ab["blocks.1.adaln_proj.linear"].second,
                  ab["blocks.1.adaln_proj.linear"].first, s, same, "adaln");
    expect_merged(ck.get("token_refiner.refiner_blocks.0.ff.net.2.weight"),
                  base.get("token_refiner.refiner_blocks.0.ff.net.2.weight"),
                  ab["token_refiner.blocks.0.mlp.fc2"].second, ab["token_refiner.blocks.0.mlp.fc2"].first, s, same,
                  "refiner fc2");
    expect_merged(ck.get("proj_in.weight"), base.get("proj_in.weight"), ab["video_patch_proj"].second,
                  ab["video_patch_proj"].first, s, same, "proj_in");
    // Untouched parameters stay bitwise the base.
    Tensor a = ck.get("transformer_blocks.0.attn.to_q.weight"), b = base.get("transformer_blocks.0.attn.to_q.weight");
    EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  }
}

TEST(Lora, DiffusersNamesAndMetadataAlpha) {
  ScratchDir dir;
  Tensor A = seeded_normal({2, kH}, 3, 1), B = seeded_normal({kI, 2}, 3, 2);
  const std::string path = dir / "d.safetensors";
  write_safetensors(path,
                    {{"transformer.transformer_blocks.2.attn.to_k.lora_A.weight", A},
                     {"transformer.transformer_blocks.2.attn.to_k.lora_B.weight", B}},
                    {{"alpha", "1"}});
  DitCheckpoint ck = mini(), base = mini();
  ck.add_lora(path, 2.0);
  const std::string key = "transformer_blocks.2.attn.to_k.weight";
  expect_merged(
      ck.get(key), base.get(key), B, A, 2.0 * 1 / 2, [](int64_t i) { return i; }, key);
}

// A rank's row / column slice is bitwise the same block of the full merge, whatever the slice.
TEST(Lora, SlicesAreBitwiseTheFullMerge) {
  ScratchDir dir;
  Weights w;
  for (const char* m : {"blocks.0.attn.qkv_proj", "blocks.0.attn.out_proj", "blocks.0.mlp.fc2"}) {
    const bool qkv = std::string(m).find("qkv") != std::string::npos,
               out = std::string(m).find("out") != std::string::npos;
    w.emplace_back(std::string(m) + ".lora_A.weight", seeded_normal({5, qkv ? kH : out ? kI : kF}, 11, w.size()));
    w.emplace_back(std::string(m) + ".lora_B.weight", seeded_normal({qkv ? 3 * kI : kH, 5}, 11, w.size()));
  }
  write_safetensors(dir / "s.safetensors", w);
  DitCheckpoint ck = mini();
  ck.add_lora(dir / "s.safetensors", 0.3);
  for (const std::string key : {"transformer_blocks.0.attn.to_v.weight"}) {
    Tensor full = ck.get(key);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1}, {32, 96}, {97, 448}, {0, 448}}) {
      Tensor part = ck.get_rows(key, b, e);
      EXPECT_EQ(0, std::memcmp(part.raw(), full.rows(b, e).raw(), part.nbytes())) << key << " rows " << b;
    }
  }
  for (const std::string key : {"transformer_blocks.0.attn.to_out.0.weight", "transformer_blocks.0.ff.net.2.weight"}) {
    Tensor full = ck.get(key);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 7}, {33, 77}, {64, full.dim(1)}}) {
      Tensor part = ck.get_columns(key, b, e);
      for (int64_t i = 0; i < full.dim(0); ++i)
        for (int64_t j = b; j < e; ++j)
          ASSERT_EQ(part.data<float>()[i * (e - b) + j - b], full.data<float>()[i * full.dim(1) + j]) << key;
    }
  }
}

TEST(Lora, ErrorsNameTheFileAndKey) {
  ScratchDir dir;
  auto expect_error = [&](const Weights& w, const std::vector<std::string>& needles) {
    const std::string p = dir / "bad.safetensors";
    write_safetensors(p, w);
    DitCheckpoint ck = mini();
    try {
      ck.add_lora(p, 1.0);
      ADD_FAILURE() << "no error for " << needles.back();
    } catch (const Error& e) {
      for (const auto& n : {p, needles.front(), needles.back()})
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << "\n  lacks: " << n;
    }
  };
  Tensor A = seeded_normal({2, kH}, 1, 1), B = seeded_normal({kH, 2}, 1, 2);
  // Unknown module, unknown key, wrong shape, missing half, mixed layouts.
  expect_error({{"blocks.99.mlp.fc2.lora_A.weight", A}, {"blocks.99.mlp.fc2.lora_B.weight", B}},
               {"blocks.99.mlp.fc2.lora_A.weight", "not a linear layer"});
  expect_error({{"blocks.0.mlp.fc2.lora_A.weight", seeded_normal({2, kF}, 1, 1)},
                {"blocks.0.mlp.fc2.lora_B.weight", B},
                {"blocks.0.mlp.fc2.dora_scale", B}},
               {"blocks.0.mlp.fc2.dora_scale", "not a LoRA tensor"});
  expect_error({{"blocks.0.mlp.fc2.lora_A.weight", A}, {"blocks.0.mlp.fc2.lora_B.weight", B}},
               {"blocks.0.mlp.fc2.lora_A.weight", "do not fit"});
  expect_error({{"blocks.0.mlp.fc2.lora_A.weight", seeded_normal({2, kF}, 1, 1)}}, {"blocks.0.mlp.fc2", "lacks"});
  expect_error({{"blocks.0.mlp.fc2.lora_A.weight", seeded_normal({2, kF}, 1, 1)},
                {"blocks.0.mlp.fc2.lora_B.weight", B},
                {"lora_unet_blocks_0_mlp_fc1.lora_down.weight", A}},
               {"mixes kohya", "lora_A"});
  expect_error({{"weird.tensor", A}}, {"no LoRA keys", "lora_A"});
}

TEST(Lora, DigestFollowsContentAndStrengthNotThePath) {
  ScratchDir dir;
  Weights w = {{"blocks.0.mlp.fc2.lora_A.weight", seeded_normal({2, kF}, 5, 1)},
               {"blocks.0.mlp.fc2.lora_B.weight", seeded_normal({kH, 2}, 5, 2)}};
  write_safetensors(dir / "a.safetensors", w);
  write_safetensors(dir / "b.safetensors", w);
  auto digest = [&](const std::string& p, double s) {
    DitCheckpoint ck = mini();
    ck.add_lora(p, s);
    return ck.lora_digest();
  };
  EXPECT_EQ(digest(dir / "a.safetensors", 1.0), digest(dir / "b.safetensors", 1.0));
  EXPECT_NE(digest(dir / "a.safetensors", 1.0), digest(dir / "a.safetensors", 0.5));
  EXPECT_NE(digest(dir / "a.safetensors", 1.0), mini().lora_digest());
  EXPECT_EQ(parse_lora_spec("x/y.safetensors:0.25"), std::make_pair(std::string("x/y.safetensors"), 0.25));
  EXPECT_EQ(parse_lora_spec("c:/y.safetensors"), std::make_pair(std::string("c:/y.safetensors"), 1.0));
}

namespace {
// A LoRA over every block GEMM, AdaLN and the refiner of the mini model (kohya layout, alpha 2, rank 4), and
// a second one (PEFT, interleaved qkv). Used by the multi-rank CTest entries (H3_LORA_OUT) and the tests
// below.
void write_mini_loras(const std::string& dir) {
  Weights a, b;
  for (int n = 0; n < kMini.num_layers; ++n) {
    const std::string p = "blocks." + std::to_string(n) + ".";
    for (auto [m, out, in] : {std::tuple{"attn.qkv_proj", 3 * kI, kH},
                              {"attn.out_proj", kH, kI},
                              {"mlp.fc1", 2 * kF, kH},
                              {"mlp.fc2", kH, kF},
                              {"adaln_proj.linear", 18 * kH, int64_t{kMini.time_embed_dim}}}) {
      std::string k = "lora_unet_" + p + m;
      for (char& ch : k)
        if (ch == '.') ch = '_';
      a.emplace_back(k + ".lora_down.weight", seeded_normal({4, in}, 21, a.size()));
      a.emplace_back(k + ".lora_up.weight", seeded_normal({out, 4}, 21, a.size()));
      a.emplace_back(k + ".alpha", Tensor::from(std::vector<float>{2.0f}, {}));
      if (std::string(m) == "attn.qkv_proj" || std::string(m) == "mlp.fc1") {
        b.emplace_back(p + m + ".lora_A.default.weight", seeded_normal({2, in}, 22, b.size()));
        b.emplace_back(p + m + ".lora_B.default.weight", seeded_normal({out, 2}, 22, b.size()));
      }
    }
  }
  a.emplace_back("lora_unet_token_refiner_blocks_1_attn_qkv_proj.lora_down.weight", seeded_normal({4, kH}, 23, 0));
  a.emplace_back("lora_unet_token_refiner_blocks_1_attn_qkv_proj.lora_up.weight", seeded_normal({3 * kI, 4}, 23, 1));
  write_safetensors(dir + "/mini-lora-a.safetensors", a);
  write_safetensors(dir + "/mini-lora-b.safetensors", b);
}

std::string run_h3(const std::string& args, int& status) {
  std::string cmd = std::string(H3_BIN_DIR) + "/h3 " + args + " 2>&1", out;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (p && fgets(buf.data(), buf.size(), p)) out += buf.data();
  int st = p ? pclose(p) : -1;
  status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

bool bitwise(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}
}  // namespace

// Writes the multi-rank tests' LoRA files into $H3_LORA_OUT (a CTest fixture), or a scratch folder.
TEST(LoraFiles, WriteFixtures) {
  ScratchDir dir;
  const char* env = std::getenv("H3_LORA_OUT");
  const std::string out = env ? env : dir.path().string();
  fs::create_directories(out);
  write_mini_loras(out);
  DitCheckpoint ck = mini();
  ck.add_lora(out + "/mini-lora-a.safetensors", 0.8);
  ck.add_lora(out + "/mini-lora-b.safetensors", 1.0);
  EXPECT_EQ(ck.loras()[0]->layout, LoraLayout::kohya);
  EXPECT_EQ(ck.loras()[1]->layout, LoraLayout::peft);
  EXPECT_EQ(ck.loras()[0]->targets.size(), 3u * (3 + 4) + 3);
}

// The LoRA merged on load gives bitwise the outputs of the same LoRA baked in offline (h3 convert), on 1 rank
// in process and on 3 ranks through the CLI.
TEST(Lora, MergedOnLoadEqualsBakedOffline) {
  ScratchDir dir;
  write_mini_loras(dir.path().string());
  const std::string la = dir / "mini-lora-a.safetensors", lb = dir / "mini-lora-b.safetensors";
  DitCheckpoint ck = mini();
  ck.add_lora(la, 0.8);
  ck.add_lora(lb, 1.0);
  const std::string baked = dir / "baked.safetensors";
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  export_dit(ck, DType::f32, ExportLayout::diffusers, QuantFormat::none, tensors, meta);
  write_safetensors(baked, tensors, meta);
  DitInputs in = make_synthetic_inputs(kMini, SyntheticRequest{});
  DitOutputs a = DitModel(ck, Precision::f32).forward(in);
  DitOutputs b = DitModel(DitCheckpoint::open(baked), Precision::f32).forward(in);
  DitOutputs base = DitModel(mini(), Precision::f32).forward(in);
  EXPECT_TRUE(bitwise(a.video, b.video));
  EXPECT_TRUE(bitwise(a.audio, b.audio));
  EXPECT_FALSE(bitwise(a.video, base.video)) << "the LoRA changed nothing";

  // The CLI: convert bakes, forward merges on load on 3 ranks (tensor mode slices every LoRA'd matrix).
  int st = 0;
  std::string out = run_h3("--log-level warn convert procedural:mini --lora " + la + ":0.8 --lora " + lb + " -o " +
                               (dir / "cli-baked.safetensors").string(),
                           st);
  ASSERT_EQ(st, 0) << out;
  out = run_h3("--log-level warn forward --model " + (dir / "cli-baked.safetensors").string() + " --dump-output " +
                   (dir / "o1.safetensors").string(),
               st);
  ASSERT_EQ(st, 0) << out;
  for (const char* mode : {"ulysses", "tensor"}) {
    out = run_h3(std::string("--log-level warn forward --ranks 3 --mode ") + mode + " --lora " + la + ":0.8 --lora " +
                     lb + " --dump-output " + (dir / "o3.safetensors").string(),
                 st);
    ASSERT_EQ(st, 0) << out;
    SafeTensors o1 = SafeTensors::open(dir / "o1.safetensors"), o3 = SafeTensors::open(dir / "o3.safetensors");
    if (std::string(mode) == "ulysses") {
      EXPECT_TRUE(bitwise(o1.get("video"), o3.get("video"))) << mode;
      EXPECT_TRUE(bitwise(o1.get("audio"), o3.get("audio"))) << mode;
    } else {
      double num = 0, den = 0;
      for (int64_t i = 0; i < o1.get("video").numel(); ++i) {
        const double d = o1.get("video").get(i) - o3.get("video").get(i);
        num += d * d;
        den += o1.get("video").get(i) * o1.get("video").get(i);
      }
      EXPECT_LE(std::sqrt(num / den), 1e-6) << mode;
    }
  }
}
