// Every component from every weight source, on the CPU: the VAEs from sharded diffusers folders (index + shards),
// from procedural weights without a file and from the mapped procedural file, bitwise the same decode; the DiT's
// direct reads (DitCheckpoint::stored_read: the qkv split, the fc1 swap, rank slices, per-tensor FP8) against its
// host path for every layout; and the streamed `h3 convert` against the in-memory export, byte for byte, for every
// layout and quantization.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/device_loader.h"
#include "io/procedural.h"
#include "io/quant.h"
#include "io/weight_files.h"
#include "model/dit/checkpoint.h"
#include "model/dit/export.h"
#include "model/vae/open.h"
#include "model/vae/procedural.h"
#include "ops/ops.h"
#include "pipeline/noise.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using h3::test::ScratchDir;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// The in-memory export of `src` (export_dit) written to `path`.
void write_exported_dit(const DitCheckpoint& src, DType dt, ExportLayout layout, QuantFormat q,
                        const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> ts;
  std::map<std::string, std::string> meta;
  export_dit(src, dt, layout, q, ts, meta);
  write_safetensors(path, ts, meta);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// All tensors of a source, in the order of `params`.
std::vector<std::pair<std::string, Tensor>> all_tensors(const ProceduralWeights& w) {
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& [name, shape] : w.params()) ts.emplace_back(name, w.get(name));
  return ts;
}

}  // namespace

TEST(WeightSources, VideoVaeFromShardsProceduralAndFileDecodeAlike) {
  ScratchDir dir;
  const auto proc = procedural_video_vae_weights(procedural_video_vae_config(), 5, true, "procedural:mini:seed=5");
  // A diffusers folder: config.json and the weights in shards of ~64 KiB behind an index.
  write_sharded_safetensors((dir / "vae").string(), "diffusion_pytorch_model", all_tensors(*proc), 64 << 10);
  {
    const VideoVaeConfig c = procedural_video_vae_config();
    std::ofstream(dir / "vae" / "config.json")
        << fmt::format(R"({{"latent_channels": {}, "block_out_channels": [16, 16, 16, 16], "layers_per_block": 1,
          "spatial_downsample_factors": [2, 2, 2, 2], "temporal_downsample_factors": [1, 2, 2, 1],
          "norm_num_groups": 8, "decoder_num_layers": 2, "decoder_num_attention_heads": 2,
          "decoder_attention_head_dim": 16, "decoder_num_register_tokens": 2, "decoder_ffn_mult": 2}})",
                       c.latent_channels);
  }
  const auto files = WeightFiles::open((dir / "vae").string(), "video VAE");
  ASSERT_GT(files->shard_paths().size(), 2u) << "the test must spread the VAE over several shards";
  const auto sharded = open_video_vae((dir / "vae").string(), Precision::f32, Device::cpu);
  const auto procedural = open_video_vae("procedural:mini:seed=5", Precision::f32, Device::cpu);
  const auto mapped = procedural_video_vae_file(5);
  const VideoVae from_file(*mapped, "", procedural_video_vae_config(), Precision::f32);
  EXPECT_TRUE(sharded->has_encoder());
  const Tensor z = seeded_normal({24, 1, 2, 3}, 3, 0);
  const Tensor a = sharded->decode_block(z), b = procedural->decode_block(z), c = from_file.decode_block(z);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_TRUE(same_bytes(a, c));
  const Tensor px = seeded_normal({3, 5, 32, 32}, 4, 0);
  EXPECT_TRUE(same_bytes(sharded->encode_block(px), procedural->encode_block(px)));
  EXPECT_GT(sharded->load_report().file_bytes, 0u);
  EXPECT_EQ(procedural->load_report().generated, static_cast<int64_t>(proc->params().size()));
}

TEST(WeightSources, AudioVaeFromShardsAndProceduralDecodeAlike) {
  ScratchDir dir;
  const auto proc = procedural_audio_vae_weights(procedural_audio_vae_config(), 6, true, "procedural:mini:seed=6");
  write_sharded_safetensors((dir / "audio_vae").string(), "diffusion_pytorch_model", all_tensors(*proc), 32 << 10,
                            {{"config", R"({"latent_channels": 32, "latent_dim": 64, "num_attention_heads": 2,
                              "encoder_dim": 8, "decoder_dim": 128, "resblock_kernel_sizes": [3],
                              "resblock_dilation_sizes": [[1, 3]]})"}});
  // No config.json: the first shard's "config" metadata is the config.
  const auto sharded = open_audio_vae((dir / "audio_vae").string(), Precision::f32, Device::cpu);
  const auto procedural = open_audio_vae("procedural:mini:seed=6", Precision::f32, Device::cpu);
  const Tensor z = seeded_normal({2, 32, 3}, 5, 0);
  EXPECT_TRUE(same_bytes(sharded->decode(z), procedural->decode(z)));
}

TEST(WeightSources, FullVaeConfigsAreTheReleasedOnes) {
  const VideoVaeConfig v = procedural_video_vae_config("full");
  EXPECT_EQ(v.decoder_num_layers, 36);
  EXPECT_EQ(v.decoder_dim(), 2048);
  EXPECT_EQ(v.spatial_ratio(), 16);
  EXPECT_EQ(v.temporal_ratio(), 4);
  const AudioVaeConfig a = procedural_audio_vae_config("full");
  EXPECT_EQ(a.decoder_dim, 1024);
  EXPECT_EQ(a.hop(), 800);
  int64_t video = 0, audio = 0;
  // The sources held in locals: a range-for over a member of a temporary would read it after its destruction.
  const auto vw = procedural_video_vae_weights(v, 1, true, "v");
  const auto aw = procedural_audio_vae_weights(a, 1, true, "a");
  for (const auto& [n, s] : vw->params()) video += shape_numel(s);
  for (const auto& [n, s] : aw->params()) audio += shape_numel(s);
  std::printf("procedural:full parameters: video VAE %.3f B, audio VAE %.3f B\n", video / 1e9, audio / 1e9);
  EXPECT_GT(video, int64_t{2} * 1000 * 1000 * 1000);  // 36 blocks of 16 x 2048^2 GEMM weights alone: 2.4 B
  EXPECT_NE(video_vae_config_of("procedural:full").decoder_num_layers,
            video_vae_config_of("procedural:mini").decoder_num_layers);
}

// DitCheckpoint::stored_read gathers, for every parameter of every layout, exactly the rows and columns get()
// computes on the host (qkv split per head or blocked, fc1 swapped), also for rank slices.
TEST(WeightSources, DitStoredReadsMatchTheHostPath) {
  ScratchDir dir;
  const DitCheckpoint src = DitCheckpoint::open("procedural:mini");
  for (ExportLayout layout : {ExportLayout::diffusers, ExportLayout::official, ExportLayout::comfy}) {
    const std::string path = (dir / ("dit" + std::to_string(static_cast<int>(layout)) + ".safetensors")).string();
    write_exported_dit(src, DType::f32, layout, QuantFormat::none, path);
    const DitCheckpoint ck = DitCheckpoint::open(path);
    DeviceLoader loader(Device::cpu, "dit");
    for (const auto& [key, shape] : ck.config().parameters()) {
      SCOPED_TRACE(key);
      const Tensor host = ck.get(key);
      const auto whole = ck.stored_read(key);
      ASSERT_TRUE(whole.has_value());
      EXPECT_EQ(whole->fp8_scale, 0.0f);
      EXPECT_TRUE(same_bytes(loader.load(whole->read, DType::f32), host));
      const int64_t R = shape[0];
      if (R < 3) continue;
      // Two row ranges out of order (a rank's value and gate rows), and a column range of a 2-D weight.
      const std::vector<RowRange> rows = {{R / 2, R - 1}, {1, R / 3 + 1}};
      const Tensor want_rows = gather_row_ranges(host, rows);
      EXPECT_TRUE(same_bytes(loader.load(ck.stored_read(key, rows)->read, DType::f32), want_rows));
      if (shape.size() == 2 && shape[1] >= 3) {
        const RowRange cols{1, shape[1] - 1};
        const Tensor got = loader.load(ck.stored_read(key, {{0, R}}, cols)->read, DType::f32);
        EXPECT_TRUE(same_bytes(got, ops::columns(host, cols.begin, cols.end)));
      }
    }
    EXPECT_FALSE(src.stored_read("proj_in.weight").has_value()) << "procedural weights are generated, not read";
  }
}

// Per-tensor FP8 checkpoints read as their stored bytes and scale: dequantized (ops::dequantize_fp8) they are the
// host path's dequantized values rounded to bf16; the other formats stay on the host path.
TEST(WeightSources, DitFp8CheckpointsReadTheirStoredValues) {
  ScratchDir dir;
  const DitCheckpoint src = DitCheckpoint::open("procedural:mini");
  for (QuantFormat q : {QuantFormat::fp8, QuantFormat::scaled_fp8, QuantFormat::int8}) {
    const std::string path = (dir / (std::string(quant_format_name(q)) + ".safetensors")).string();
    write_exported_dit(src, DType::bf16, ExportLayout::official, q, path);
    const DitCheckpoint ck = DitCheckpoint::open(path);
    DeviceLoader loader(Device::cpu, "dit");
    const std::string key = "transformer_blocks.0.attn.to_k.weight";
    const auto sr = ck.stored_read(key, {{1, 5}});
    if (q == QuantFormat::int8) {
      EXPECT_FALSE(sr.has_value());
      continue;
    }
    ASSERT_TRUE(sr.has_value());
    EXPECT_GT(sr->fp8_scale, 0.0f);
    const Tensor stored = loader.load(sr->read, DType::fp8_e4m3);
    EXPECT_EQ(stored.dtype(), DType::fp8_e4m3);
    const Tensor deq = ops::dequantize_fp8(stored.with_scale(Tensor::from(std::vector<float>{sr->fp8_scale}, {1})));
    EXPECT_TRUE(same_bytes(deq, ck.get(key).rows(1, 5).clone().to(DType::bf16)));
  }
}

// The streamed export writes byte for byte what the in-memory export and write_safetensors write.
TEST(WeightSources, StreamedConvertIsTheInMemoryExport) {
  ScratchDir dir;
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  struct Case {
    ExportLayout layout;
    QuantFormat q;
    DType dt;
  };
  for (const Case& c : {Case{ExportLayout::diffusers, QuantFormat::none, DType::f32},
                        Case{ExportLayout::official, QuantFormat::fp8, DType::bf16},
                        Case{ExportLayout::comfy, QuantFormat::scaled_fp8, DType::f32},
                        Case{ExportLayout::official, QuantFormat::int8_convrot, DType::f32},
                        Case{ExportLayout::diffusers, QuantFormat::nvfp4, DType::bf16},
                        Case{ExportLayout::official, QuantFormat::mxfp8, DType::f32}}) {
    SCOPED_TRACE(std::string(quant_format_name(c.q)));
    write_exported_dit(ck, c.dt, c.layout, c.q, (dir / "memory.safetensors").string());
    const ExportPlan plan = plan_export_dit(ck, c.dt, c.layout, c.q);
    const ExportStats st = write_export(plan, (dir / "stream.safetensors").string(), Device::cpu);
    EXPECT_EQ(st.file_bytes, fs::file_size(dir / "stream.safetensors"));
    EXPECT_EQ(read_all(dir / "memory.safetensors"), read_all(dir / "stream.safetensors"));
  }
}

// quantized_entries announces exactly what quantize_weight appends, for every format.
TEST(WeightSources, QuantizedEntriesMatchQuantizeWeight) {
  for (QuantFormat q : {QuantFormat::fp8, QuantFormat::scaled_fp8, QuantFormat::int8, QuantFormat::int8_convrot,
                        QuantFormat::nvfp4, QuantFormat::mxfp8})
    for (bool input_scale : {false, true})
      for (const Shape& s : {Shape{32, 64}, Shape{144, 96}}) {
        SCOPED_TRACE(std::string(quant_format_name(q)) + (input_scale ? " input_scale" : ""));
        std::vector<std::pair<std::string, Tensor>> out;
        quantize_weight("blk.fc.weight", seeded_normal(s, 9, 0), q, input_scale, out);
        const auto e = quantized_entries("blk.fc.weight", s, q, input_scale);
        ASSERT_EQ(e.size(), out.size());
        for (size_t i = 0; i < e.size(); ++i) {
          EXPECT_EQ(e[i].name, out[i].first);
          EXPECT_EQ(e[i].dtype, out[i].second.dtype()) << e[i].name;
          EXPECT_EQ(e[i].shape, out[i].second.shape()) << e[i].name;
        }
      }
}
