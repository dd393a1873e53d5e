// DiT weight streaming (DitStreaming, model/dit/streaming.h) on the CPU backend with the procedural mini DiT: any
// number of resident blocks and any ring size give bitwise the resident model's outputs (memcmp), over several
// forwards (the ring's cyclic prefetch across forwards) and with every block's activations kept; the same with the
// blocks read from the checkpoint file at each copy (the mapped source), in every layout and on tensor-parallel
// ranks, and the mapped source refused, before anything loads, for a file whose bytes are not the model's (also
// from the headers alone, as the generator checks it before its first phase).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "distributed/comm.h"
#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "model/dit/export.h"
#include "pipeline/synthetic.h"
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/scratch_dir.h"
#include "support/thread_comm.h"

using namespace h3;

namespace {

DitCheckpoint mini() {
  return DitCheckpoint::open("procedural:mini");
}

using test::expect_same_outputs;
using test::two_forwards;
const auto bitwise = test::same_bits;

// The procedural mini DiT written as a file (h3 convert's export), in `dt` and `layout`.
std::string mini_file(const h3::test::ScratchDir& dir, DType dt, ExportLayout layout) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  export_dit(mini(), dt, layout, QuantFormat::none, tensors, meta);
  const std::string path = dir / fmt::format("mini-{}-{}.safetensors", dtype_name(dt), static_cast<int>(layout));
  write_safetensors(path, tensors, meta);
  return path;
}

DitStreaming mapped(int resident, int slots) {
  return DitStreaming{.resident_blocks = resident, .ring_slots = slots, .source = ParkSource::mapped, .host = {}};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(DitStreaming, EveryResidentCountIsBitwiseTheResidentRun) {
  const DitCheckpoint ck = mini();
  const int n = ck.config().num_layers;
  ASSERT_GE(n, 3);
  for (const Precision p : {Precision::f32, Precision::bf16}) {
    const DitModel resident(ck, p);
    EXPECT_EQ(resident.resident_blocks(), n);
    EXPECT_EQ(resident.streaming_stats().streamed, 0);
    const std::vector<DitOutputs> want = two_forwards(resident);
    ASSERT_FALSE(bitwise(want[0].video, want[1].video)) << "the two forwards must differ to test the second";
    for (const int r : {0, 1, n - 1}) {
      for (const int slots : {1, 2, 3}) {
        const DitModel streamed(ck, p, DistPlan::single(), Device::cpu, {}, DitStreaming{r, slots});
        EXPECT_EQ(streamed.resident_blocks(), r);
        expect_same_outputs(two_forwards(streamed), want,
                            std::string(precision_name(p)) + ", " + std::to_string(r) + " resident, " +
                                std::to_string(slots) + " slots");
        const LayerStreamStats st = streamed.streaming_stats();
        EXPECT_EQ(st.streamed, n - r);
        EXPECT_EQ(st.misses, 0) << "forwards acquire the blocks in order";
        EXPECT_GE(st.copies, n - r) << "every streamed block was copied";
        EXPECT_GT(st.parked_bytes, 0u);
      }
    }
  }
}

TEST(DitStreaming, KeptActivationsAreBitwiseToo) {
  const DitCheckpoint ck = mini();
  const std::vector<DitOutputs> want = two_forwards(DitModel(ck, Precision::bf16), true);
  const std::vector<DitOutputs> got =
      two_forwards(DitModel(ck, Precision::bf16, DistPlan::single(), Device::cpu, {}, DitStreaming{1, 2}), true);
  ASSERT_EQ(got[1].activations.size(), want[1].activations.size());
  for (const auto& [name, t] : want[1].activations) EXPECT_TRUE(bitwise(got[1].activations.at(name), t)) << name;
}

TEST(DitStreaming, AllOrMoreResidentIsNoStreamingAndBadCountsAreRefused) {
  const DitCheckpoint ck = mini();
  const int n = ck.config().num_layers;
  const DitModel all(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{n + 4, 3});
  EXPECT_EQ(all.resident_blocks(), n);
  EXPECT_EQ(all.streaming_stats().streamed, 0);
  const std::string e = h3::test::error_of([&] {
    DitModel bad(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{-2, 3});
  });
  EXPECT_NE(e.find("DiT streaming: -2 resident blocks asked for"), std::string::npos) << e;
  const std::string s = h3::test::error_of([&] {
    DitModel bad(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{1, 0});
  });
  EXPECT_NE(s.find("a ring of 0 slots"), std::string::npos) << s;
}

// The mapped source: the streamed blocks' tensors stay in the file and are read at each copy. The diffusers layout
// (one file tensor per weight) and the released one (q/k/v one fused qkv_proj interleaved per head, fc1 = [gate;
// value]: row ranges of the stored tensors) give the resident model's bits, as does a ring of one slot.
TEST(DitStreaming, BlocksReadFromTheFileAreBitwiseTheResidentRun) {
  const h3::test::ScratchDir dir;
  for (const ExportLayout layout : {ExportLayout::diffusers, ExportLayout::official}) {
    const DitCheckpoint ck = DitCheckpoint::open(mini_file(dir, DType::f32, layout));
    const int n = ck.config().num_layers;
    const std::vector<DitOutputs> want = two_forwards(DitModel(ck, Precision::f32));
    for (const int r : {0, 1, n - 1})
      for (const int slots : {1, 2}) {
        const DitModel m(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, mapped(r, slots));
        const std::vector<DitOutputs> got = two_forwards(m);
        for (size_t f = 0; f < got.size(); ++f) {
          const std::string what =
              fmt::format("layout {}, {} resident, {} slots, forward {}", static_cast<int>(layout), r, slots, f);
          EXPECT_TRUE(bitwise(got[f].video, want[f].video)) << what;
          EXPECT_TRUE(bitwise(got[f].audio, want[f].audio)) << what;
        }
        const LayerStreamStats st = m.streaming_stats();
        EXPECT_EQ(st.streamed, n - r);
        EXPECT_EQ(st.parked_bytes, 0u) << "nothing copied to host memory";
        EXPECT_GT(st.mapped_bytes, 0u);
        EXPECT_EQ(st.staging_bytes, st.slot_bytes) << "one staging buffer per slot";
        EXPECT_EQ(st.misses, 0);
      }
  }
}

// The checkpoint object may go before the model: the streamer keeps the file open.
TEST(DitStreaming, TheMappedFileOutlivesItsCheckpointObject) {
  const h3::test::ScratchDir dir;
  const std::string path = mini_file(dir, DType::f32, ExportLayout::diffusers);
  const std::vector<DitOutputs> want = two_forwards(DitModel(DitCheckpoint::open(path), Precision::f32));
  std::unique_ptr<DitModel> m;
  {
    const DitCheckpoint ck = DitCheckpoint::open(path);
    m = std::make_unique<DitModel>(ck, Precision::f32, DistPlan::single(), Device::cpu, Numerics{}, mapped(0, 2));
  }
  const std::vector<DitOutputs> got = two_forwards(*m);
  EXPECT_TRUE(bitwise(got[1].video, want[1].video));
}

// Tensor mode over 2 ranks (threads): each rank maps only its slices (q/k/v rows and out columns of its heads, the
// FFN's value and gate rows and fc2 columns of its columns, its AdaLN rows) and gets its resident run's bits.
TEST(DitStreaming, TensorParallelRanksMapTheirOwnSlices) {
  const h3::test::ScratchDir dir;
  const std::string path = mini_file(dir, DType::f32, ExportLayout::official);
  const int n = DitCheckpoint::open(path).config().num_layers;
  h3::test::run_ranks(2, [&](Comm& comm) {
    DistPlan plan;
    plan.mode = DistMode::tensor;
    plan.world = 2, plan.rank = comm.rank();
    plan.K = 2, plan.U = 1, plan.t = comm.rank(), plan.u = 0;
    plan.world_comm = &comm;
    plan.tp_comm = std::shared_ptr<Comm>(&comm, [](Comm*) {});
    plan.sp_comm = std::shared_ptr<Comm>(make_local_comm());
    const DitCheckpoint ck = DitCheckpoint::open(path);
    const std::vector<DitOutputs> want = two_forwards(DitModel(ck, Precision::f32, plan));
    const DitModel m(ck, Precision::f32, plan, Device::cpu, {}, mapped(1, 2));
    const std::vector<DitOutputs> got = two_forwards(m);
    for (size_t f = 0; f < got.size(); ++f) {
      EXPECT_TRUE(bitwise(got[f].video, want[f].video)) << "rank " << comm.rank() << ", forward " << f;
      EXPECT_TRUE(bitwise(got[f].audio, want[f].audio)) << "rank " << comm.rank() << ", forward " << f;
    }
    EXPECT_EQ(m.streaming_stats().streamed, n - 1);
    EXPECT_GT(m.sharded_bytes(), 0u);
  });
}

// A file whose stored bytes are not what the model holds cannot be read as its weights: refused before anything
// loads, with the streamer's message (how much page-locked memory the copies would need, what to do) and the reason.
TEST(DitStreaming, TheMappedSourceIsRefusedForBytesTheModelDoesNotHold) {
  const h3::test::ScratchDir dir;
  const DitCheckpoint bf16 = DitCheckpoint::open(mini_file(dir, DType::bf16, ExportLayout::diffusers));
  const std::string e = h3::test::error_of([&] {
    DitModel m(bf16, Precision::f32, DistPlan::single(), Device::cpu, {},
               DitStreaming{0, 2, ParkSource::mapped, HostMemory{64LL << 30, 4LL << 30}});
  });
  EXPECT_TRUE(has(e, "DiT: streaming its layers needs")) << e;
  EXPECT_TRUE(has(e, "but only 4.00 GiB of this host's 64.00 GiB are available")) << e;
  EXPECT_TRUE(has(e, "'transformer_blocks.0.attn.to_q.weight' is stored bf16, this run holds it in f32")) << e;
  EXPECT_TRUE(has(e, "h3 convert --quant fp8")) << e;
  // The CPU's bf16 recipe rounds f32 weights: no stored tensor is its bytes.
  const DitCheckpoint f32 = DitCheckpoint::open(mini_file(dir, DType::f32, ExportLayout::diffusers));
  const std::string b =
      h3::test::error_of([&] { DitModel m(f32, Precision::bf16, DistPlan::single(), Device::cpu, {}, mapped(1, 2)); });
  EXPECT_TRUE(has(b, "the CPU's bf16 recipe holds f32 weights rounded to bf16")) << b;
  // Procedural weights have no file.
  const std::string p = h3::test::error_of(
      [&] { DitModel m(mini(), Precision::f32, DistPlan::single(), Device::cpu, {}, mapped(2, 2)); });
  EXPECT_TRUE(has(p, "procedural weights are generated where they load")) << p;
  // Nothing streams: the source does not matter.
  const DitModel all(mini(), Precision::f32, DistPlan::single(), Device::cpu, {}, mapped(-1, 2));
  EXPECT_EQ(all.resident_blocks(), all.config().num_layers);
}

// The generator's check before its first phase (DitModel::check_streaming): the constructor's refusals word for word
// from the headers, the request's LoRAs refused too, and a file whose bytes are the model's taken.
TEST(DitStreaming, TheMappedSourceIsCheckedFromTheHeadersAlone) {
  const h3::test::ScratchDir dir;
  const DitCheckpoint bf16 = DitCheckpoint::open(mini_file(dir, DType::bf16, ExportLayout::diffusers));
  const DitStreaming s{0, 2, ParkSource::mapped, HostMemory{64LL << 30, 4LL << 30}};
  const std::string built =
      h3::test::error_of([&] { DitModel m(bf16, Precision::f32, DistPlan::single(), Device::cpu, {}, s); });
  const std::string checked = h3::test::error_of(
      [&] { DitModel::check_streaming(bf16, Precision::f32, DistPlan::single(), Device::cpu, {}, s, false); });
  EXPECT_FALSE(built.empty());
  EXPECT_EQ(checked, built);
  const DitCheckpoint f32 = DitCheckpoint::open(mini_file(dir, DType::f32, ExportLayout::diffusers));
  EXPECT_NO_THROW(DitModel::check_streaming(f32, Precision::f32, DistPlan::single(), Device::cpu, {}, s, false));
  const std::string loras = h3::test::error_of(
      [&] { DitModel::check_streaming(f32, Precision::f32, DistPlan::single(), Device::cpu, {}, s, true); });
  EXPECT_TRUE(has(loras, "LoRAs are merged into its weights")) << loras;
  // The constructor's other checks come first, as they do when it builds.
  const std::string fp8 = h3::test::error_of(
      [&] { DitModel::check_streaming(f32, Precision::fp8, DistPlan::single(), Device::cpu, {}, s, false); });
  EXPECT_TRUE(has(fp8, "fp8 runs on the GPU only")) << fp8;
  // Nothing streams: nothing to check.
  EXPECT_NO_THROW(
      DitModel::check_streaming(bf16, Precision::f32, DistPlan::single(), Device::cpu, {}, mapped(-1, 2), true));
}
