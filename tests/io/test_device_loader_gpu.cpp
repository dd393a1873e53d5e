// The staged loader on the GPU (pinned buffers, copies overlapped with reads, conversions on the device) and what
// rides on it: the DiT and the VAEs read from files straight to the device, bitwise the weights the host path or the
// device's procedural generation gives; `h3 convert` made on the GPU, byte for byte the CPU's file; the full-size
// procedural VAEs built on the device. Without a GPU every test here reports itself SKIPPED, loudly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/device_loader.h"
#include "io/weight_files.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/dit/export.h"
#include "model/vae/open.h"
#include "model/vae/procedural.h"
#include "ops/ops.h"
#include "pipeline/noise.h"
#include "pipeline/synthetic.h"
#include "support/gpu_test.h"
#include "support/scratch_dir.h"

namespace h3 {
namespace {

using h3::test::ScratchDir;

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.cpu(), y = b.cpu();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         (x.nbytes() == 0 || std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0);
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// Staging buffers of 64 KiB against tensors of ~1 MB: every tensor crosses several buffers and the rotation wraps
// many times; row/column gathers and conversions land as the host's.
TEST(CudaLoader, StagedLoadsMatchTheHost) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  // c: per-row FP8 takes rows of whole 8-column vectors (every FP8 GEMM weight has them: the per-layer rule keeps
  // any other layer in bf16), so its width is odd in 8-column vectors (98) rather than odd in columns.
  const Tensor a = seeded_normal({301, 777}, 1, 0), b = seeded_normal({5, 3}, 2, 0),
               c = seeded_normal({301, 784}, 3, 0);
  write_safetensors((dir / "t.safetensors").string(),
                    {{"a", a}, {"b", b}, {"c", c}, {"a16", a.to(DType::bf16)}, {"h", a.to(DType::f16)}});
  const SafeTensors f = SafeTensors::open((dir / "t.safetensors").string());
  DeviceLoader gpu(Device::cuda, "gpu", {64 << 10, 3, 16 << 10});
  DeviceLoader host(Device::cpu, "host");
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_TRUE(same_bytes(gpu.load(f, "a", DType::f32), a));
    EXPECT_TRUE(same_bytes(gpu.load(f, "a", DType::bf16), a.to(DType::bf16)));
    EXPECT_TRUE(same_bytes(gpu.load(f, "a16", DType::f32), a.to(DType::bf16).to(DType::f32)));
    EXPECT_TRUE(same_bytes(gpu.load(f, "h", DType::f32), a.to(DType::f16).to(DType::f32)));
    EXPECT_TRUE(same_bytes(gpu.load(f, "b", DType::f32), b));
    const TensorRead r = read_rows(f, "a", {{200, 290}, {3, 40}}, {11, 700});
    EXPECT_TRUE(same_bytes(gpu.load(r, DType::f32), host.load(r, DType::f32)));
  }
  // FP8 per tensor and per row: ops::quantize_fp8(_rows) of the uploaded values, scales included.
  const Tensor q = gpu.load(f, "a", DType::fp8_e4m3), ref = ops::quantize_fp8(a.to_device(Device::cuda));
  EXPECT_TRUE(same_bytes(q, ref));
  EXPECT_TRUE(same_bytes(*q.scale(), *ref.scale()));
  const Tensor qr = gpu.load(read_tensor(f, "c"), DType::fp8_e4m3, true),
               rr = ops::quantize_fp8_rows(c.to_device(Device::cuda));
  EXPECT_TRUE(same_bytes(qr, rr));
  EXPECT_TRUE(same_bytes(*qr.scale(), *rr.scale()));
  const LoadReport& rep = gpu.finish();
  std::printf("%s\n", rep.summary().c_str());
  EXPECT_EQ(rep.tensors, 3 * 6 + 2);
}

// The DiT from a file on the GPU (direct reads, rank slices) is bitwise the DiT generated on the GPU from the same
// procedural weights, in bf16 and FP8, on 1 rank and as a tensor-parallel rank.
TEST(CudaLoader, DitFromFileIsTheProceduralDit) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  const DitCheckpoint proc = DitCheckpoint::open("procedural:mini");
  const DitInputs in = make_synthetic_inputs(proc.config(), SyntheticRequest{});
  for (ExportLayout layout : {ExportLayout::official, ExportLayout::comfy}) {
    const std::string path = (dir / "dit.safetensors").string();
    (void)write_export(plan_export_dit(proc, DType::f32, layout, QuantFormat::none), path, Device::cpu);
    const DitCheckpoint file = DitCheckpoint::open(path);
    for (Precision p : {Precision::bf16, Precision::fp8}) {
      const DitModel a(file, p, DistPlan::single(), Device::cuda), b(proc, p, DistPlan::single(), Device::cuda);
      EXPECT_GT(a.load_report().tensors, 0);
      EXPECT_GT(b.load_report().generated, 0);
      const DitOutputs x = a.forward(in), y = b.forward(in);
      EXPECT_TRUE(same_bytes(x.video, y.video)) << precision_name(p);
      EXPECT_TRUE(same_bytes(x.audio, y.audio)) << precision_name(p);
    }
  }
}

// Bytes staged for the GPU are scanned for NaN / Inf as they are read: a tensor of odd byte count (15 FP8 values)
// leaves the next one at an odd buffer offset, which is moved to an 8-byte boundary so that every staged part holds
// whole elements; the bad values sit across 4 KiB buffer boundaries and at the very end. The loader and its
// buffers work on after a refusal.
TEST(CudaLoader, StagedBytesAreScannedForNonFiniteValues) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  Tensor odd(DType::fp8_e4m3, {3, 5});
  for (int64_t i = 0; i < odd.numel(); ++i) static_cast<uint8_t*>(odd.raw())[i] = static_cast<uint8_t>(0x30 + i);
  Tensor w = seeded_normal({301, 77}, 5, 0);
  const int64_t last = w.numel() - 1;
  w.data<float>()[1023] = std::nanf("");  // the last value of the first 4 KiB of f32
  w.data<float>()[last] = HUGE_VALF;
  const std::string path = (dir / "nan.safetensors").string();
  write_safetensors(path, {{"odd", odd}, {"w", w}, {"w16", w.to(DType::bf16)}, {"clean", seeded_normal({7, 9}, 6, 0)}});
  const SafeTensors f = SafeTensors::open(path);
  DeviceLoader gpu(Device::cuda, "test DiT", {4096, 3, 1024});
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_TRUE(same_bytes(gpu.load(f, "odd", DType::fp8_e4m3), odd));
    for (const char* key : {"w", "w16"}) {
      std::string e;
      try {
        (void)gpu.load(f, key, DType::bf16);
      } catch (const Error& ex) {
        e = ex.what();
      }
      EXPECT_NE(e.find(path), std::string::npos) << e;
      EXPECT_NE(e.find(std::string("test DiT weight '") + key + "' holds 2 non-finite values"), std::string::npos) << e;
      EXPECT_NE(e.find("the first at element 1023;"), std::string::npos) << e;
    }
    const TensorRead r = read_rows(f, "w", {{20, 300}}, {1, 76});  // leaves both bad values out
    EXPECT_TRUE(same_bytes(gpu.load(r, DType::f32), DeviceLoader(Device::cpu, "host").load(r, DType::f32)));
    EXPECT_TRUE(same_bytes(gpu.load(f, "clean", DType::f32), seeded_normal({7, 9}, 6, 0)));
  }
}

// The DiT read straight to the GPU (no host copy) refuses a checkpoint holding a NaN or an Inf when it loads,
// naming the file, the weight and the element, as the host path does.
TEST(CudaLoader, DitOnTheGpuRefusesNonFiniteWeights) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  const DitCheckpoint proc = DitCheckpoint::open("procedural:mini");
  const std::string base = (dir / "dit.safetensors").string();
  (void)write_export(plan_export_dit(proc, DType::f32, ExportLayout::diffusers, QuantFormat::none), base, Device::cpu);
  const SafeTensors f = SafeTensors::open(base);
  const std::string victim = "transformer_blocks.1.attn.to_k.weight";
  ASSERT_TRUE(f.has(victim));
  for (const float bad : {std::nanf(""), -HUGE_VALF}) {
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const auto& k : f.keys()) {
      Tensor t = f.get(k).to(DType::f32);  // a copy
      if (k == victim) t.data<float>()[17] = bad;
      ts.emplace_back(k, t);
    }
    const std::string damaged = (dir / "damaged.safetensors").string();
    write_safetensors(damaged, ts, f.metadata());
    const DitCheckpoint file = DitCheckpoint::open(damaged);
    for (Precision p : {Precision::bf16, Precision::fp8}) {
      std::string e;
      try {
        const DitModel m(file, p, DistPlan::single(), Device::cuda);
      } catch (const Error& ex) {
        e = ex.what();
      }
      EXPECT_NE(e.find(damaged), std::string::npos) << e;
      EXPECT_NE(e.find("'" + victim + "' holds 1 non-finite value"), std::string::npos) << e;
      EXPECT_NE(e.find("element 17;"), std::string::npos) << e;
    }
  }
}

// A VAE from a sharded folder on the GPU (staged reads, to_qkv-free diffusers names) decodes bitwise as the same
// procedural weights generated on the GPU, in f32 and bf16 (GEMM weights converted on the device either way).
TEST(CudaLoader, VaesFromShardsOnTheGpu) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  const auto w = procedural_video_vae_weights(procedural_video_vae_config(), 5, false, "v");
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const auto& [n, s] : w->params()) ts.emplace_back(n, w->get(n));
  write_sharded_safetensors((dir / "vae").string(), "diffusion_pytorch_model", ts, 32 << 10);
  const auto files = WeightFiles::open((dir / "vae").string(), "video VAE");
  ASSERT_GT(files->shard_paths().size(), 2u);
  for (Precision p : {Precision::f32, Precision::bf16}) {
    const VideoVae from_files(*files, "", procedural_video_vae_config(), p, Device::cuda);
    const VideoVae generated(*w, "", procedural_video_vae_config(), p, Device::cuda);
    const Tensor z = seeded_normal({24, 1, 2, 3}, 3, 0);
    EXPECT_TRUE(same_bytes(from_files.decode_block(z), generated.decode_block(z))) << precision_name(p);
    EXPECT_GT(from_files.load_report().file_bytes, 0u);
    EXPECT_GT(generated.load_report().generated, 0);
  }
}

// `h3 convert` on the GPU writes the CPU's bytes (generation, fusion, bf16 rounding and FP8 quantization there).
TEST(CudaLoader, ConvertOnTheGpuWritesTheCpuFile) {
  H3_REQUIRE_GPU();
  ScratchDir dir;
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  for (QuantFormat q : {QuantFormat::none, QuantFormat::fp8, QuantFormat::scaled_fp8, QuantFormat::nvfp4})
    for (ExportLayout layout : {ExportLayout::diffusers, ExportLayout::official}) {
      SCOPED_TRACE(std::string(quant_format_name(q)));
      const ExportPlan plan = plan_export_dit(ck, DType::bf16, layout, q);
      (void)write_export(plan, (dir / "cpu.safetensors").string(), Device::cpu);
      (void)write_export(plan, (dir / "gpu.safetensors").string(), Device::cuda);
      EXPECT_EQ(read_all(dir / "cpu.safetensors"), read_all(dir / "gpu.safetensors"));
    }
}

// procedural:full VAEs at the released shapes, generated on the GPU: built, and a small decode runs.
TEST(CudaLoader, FullSizeProceduralVaesOnTheGpu) {
  H3_REQUIRE_GPU();
  const auto v = procedural_video_vae_full(kDefaultProceduralSeed, Precision::bf16, Device::cuda);
  std::printf("%s\n", v->load_report().summary().c_str());
  EXPECT_EQ(v->config().decoder_num_layers, 36);
  const Tensor out = v->decode_block(seeded_normal({v->config().latent_channels, 1, 2, 2}, 1, 0)).cpu();
  EXPECT_EQ(out.dim(0), 3);
  const auto a = procedural_audio_vae_full(kDefaultProceduralSeed, Precision::f32, Device::cuda);
  std::printf("%s\n", a->load_report().summary().c_str());
  const Tensor wav = a->decode(seeded_normal({2, a->config().latent_channels, 2}, 2, 0));
  EXPECT_EQ(wav.numel() % (2 * 1600), 0);
}

}  // namespace h3
