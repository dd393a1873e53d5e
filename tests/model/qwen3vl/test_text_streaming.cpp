// The Qwen3-VL text tower with streamed decoder layers (model/qwen3vl/text_streaming.cpp) on the CPU backend, where
// the ring's copies happen at once: every requested state bitwise (memcmp) equal to the resident tower's, for 0, 1,
// half and all-but-one resident layers, rings of 1..3 slots, repeated and shortened forwards (out-of-order acquires),
// the layer hook called the same way, and tensor-parallel over 2 ranks (threads) with each rank parking its own
// slices. Then the mapped source (the layers read from the checkpoint at each copy, [up; gate] as two stored slices)
// on the procedural mini tower's file: the same bits, on 1 and 2 ranks, and the refusals.
#include <gtest/gtest.h>

#include <cstring>

#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/golden.h"
#include "support/thread_comm.h"

using namespace h3;

namespace {

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return ids;
}

const auto same_bytes = test::same_bits;

struct Pass {
  Qwen3VlTextOutputs out;
  std::vector<std::pair<int64_t, int64_t>> hook_calls;
};

Pass run(const Qwen3VlTextModel& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& keep, bool normed) {
  Pass r;
  r.out = m.forward(ids, keep, normed, nullptr, nullptr,
                    [&](int64_t layer, int64_t layers) { r.hook_calls.emplace_back(layer, layers); });
  return r;
}

// Every state `want` holds is in `got` with the same bytes, and the hooks were called alike.
void expect_same(const Pass& got, const Pass& want, const std::string& what) {
  ASSERT_EQ(got.out.hidden_states.size(), want.out.hidden_states.size()) << what;
  for (const auto& [k, t] : want.out.hidden_states) {
    ASSERT_TRUE(got.out.hidden_states.count(k)) << what << ": hidden_states[" << k << "] missing";
    EXPECT_TRUE(same_bytes(got.out.hidden_states.at(k), t)) << what << ": hidden_states[" << k << "] differs";
  }
  EXPECT_EQ(got.out.last_normed.defined(), want.out.last_normed.defined()) << what;
  if (want.out.last_normed.defined()) {
    EXPECT_TRUE(same_bytes(got.out.last_normed, want.out.last_normed)) << what;
  }
  EXPECT_EQ(got.hook_calls, want.hook_calls) << what;
}

// The golden mini tower (51 layers of width 32, 2 KV heads), opened once per test.
class Qwen3VlTextStreaming : public test::GoldenFileTest {
 protected:
  Qwen3VlTextStreaming() : GoldenFileTest("qwen3vl-text-mini.safetensors") {}
  void SetUp() override {
    GoldenFileTest::SetUp();
    if (IsSkipped()) return;
    f = std::make_shared<SafeTensors>(file());
    w = std::make_unique<Qwen3VlTextWeights>(Qwen3VlTextWeights::from_file(f));
    c = detect_qwen3vl_text_config(*w);
  }
  std::shared_ptr<SafeTensors> f;
  std::unique_ptr<Qwen3VlTextWeights> w;
  Qwen3VlTextConfig c;
};

}  // namespace

TEST_F(Qwen3VlTextStreaming, StreamedLayersGiveTheResidentBits) {
  const int64_t n = c.n_layers;
  ASSERT_GE(n, 4);
  const Qwen3VlTextModel resident(*w, c, -1, Qwen3VlTextOptions{});
  EXPECT_EQ(resident.layers_streamed(), 0);
  const std::vector<int32_t> ids = prompt(19, c.vocab_size);
  const std::vector<int64_t> all{0, 1, n / 2, n - 1, n}, early{3};
  const Pass want_all = run(resident, ids, all, true), want_early = run(resident, ids, early, false);
  // Streaming changes nothing that can be seen: the states differ from layer to layer (the test is not vacuous).
  ASSERT_FALSE(same_bytes(want_all.out.hidden_states.at(1), want_all.out.hidden_states.at(n)));

  struct Case {
    int resident, slots;
  };
  for (const Case k :
       {Case{0, 3}, Case{1, 3}, Case{static_cast<int>(n / 2), 2}, Case{static_cast<int>(n - 1), 3}, Case{0, 1}}) {
    const std::string what = fmt::format("{} resident, {} slots", k.resident, k.slots);
    Qwen3VlTextOptions o;
    o.resident_layers = k.resident;
    o.ring_slots = k.slots;
    const Qwen3VlTextModel streamed(*w, c, -1, o);
    EXPECT_EQ(streamed.layers_streamed(), n - k.resident) << what;
    EXPECT_GT(streamed.bytes_streamed(), 0u) << what;
    // Twice (the ring wraps around to the first layers), then a forward that stops after layer 3 (the prefetched
    // layers are not the ones the next pass needs first), then the whole tower again.
    expect_same(run(streamed, ids, all, true), want_all, what + ", first pass");
    expect_same(run(streamed, ids, all, true), want_all, what + ", second pass");
    expect_same(run(streamed, ids, early, false), want_early, what + ", short pass");
    expect_same(run(streamed, ids, all, true), want_all, what + ", after the short pass");
    const LayerStreamStats s = streamed.stream_stats();
    EXPECT_EQ(s.streamed, n - k.resident) << what;
    if (s.streamed > k.slots)  // the ring cycles: every streamed layer copied in each of the three whole passes
      EXPECT_GE(s.copies, 3 * s.streamed) << what;
    else  // every streamed layer keeps a slot of its own: copied once
      EXPECT_EQ(s.copies, s.streamed) << what;
  }
}

TEST_F(Qwen3VlTextStreaming, AllLayersResidentOrMoreMeansNoStreamer) {
  Qwen3VlTextOptions o;
  o.resident_layers = static_cast<int>(c.n_layers);
  EXPECT_EQ(Qwen3VlTextModel(*w, c, -1, o).layers_streamed(), 0);
  // Of the 6 layers loaded, 2 stay: the streamer covers the loaded layers only.
  o.resident_layers = 2;
  const Qwen3VlTextModel six(*w, c, 6, o);
  EXPECT_EQ(six.layers_streamed(), 4);
  const std::vector<int32_t> ids = prompt(7, c.vocab_size);
  EXPECT_TRUE(
      same_bytes(six.hidden_state(ids, 6), Qwen3VlTextModel(*w, c, 6, Qwen3VlTextOptions{}).hidden_state(ids, 6)));
}

TEST_F(Qwen3VlTextStreaming, BadOptionsAreRefusedWithTheReason) {
  Qwen3VlTextOptions o;
  o.resident_layers = -2;
  EXPECT_NE(test::error_of([&] { Qwen3VlTextModel m(*w, c, 4, o); }).find("-2 resident layers"), std::string::npos);
  o.resident_layers = 1;
  o.ring_slots = 0;
  EXPECT_NE(test::error_of([&] { Qwen3VlTextModel m(*w, c, 4, o); }).find("ring of 0 slots"), std::string::npos);
}

// Two ranks (threads sharing the process), each holding one of the mini tower's 2 KV-head units: every rank's
// streamed run gives the bytes of its resident run, which are the bytes of the 1-rank tower.
TEST_F(Qwen3VlTextStreaming, TensorParallelRanksParkTheirOwnSlices) {
  ASSERT_EQ(c.n_kv_heads, 2);
  const int64_t n = c.n_layers;
  const std::vector<int32_t> ids = prompt(13, c.vocab_size);
  const std::vector<int64_t> keep{1, n - 1, n};
  const Pass one = run(Qwen3VlTextModel(*w, c, -1, Qwen3VlTextOptions{}), ids, keep, true);
  std::vector<size_t> sharded(2), streamed(2);
  test::run_ranks(2, [&](Comm& comm) {
    const Qwen3VlTextWeights mine = Qwen3VlTextWeights::from_file(f);
    Qwen3VlTextOptions o;
    o.comm = &comm;
    const Pass resident = run(Qwen3VlTextModel(mine, c, -1, o), ids, keep, true);
    o.resident_layers = 1;
    o.ring_slots = 2;
    const Qwen3VlTextModel m(mine, c, -1, o);
    const std::string what = fmt::format("rank {}", comm.rank());
    EXPECT_EQ(m.units().size(), 1) << what;
    EXPECT_EQ(m.layers_streamed(), n - 1) << what;
    sharded[static_cast<size_t>(comm.rank())] = m.bytes_sharded();
    streamed[static_cast<size_t>(comm.rank())] = m.bytes_streamed();
    const Pass got = run(m, ids, keep, true);
    expect_same(got, resident, what + " vs its resident run");
    expect_same(got, one, what + " vs 1 rank");
  });
  // Each rank parked its own unit's slices: all of its sharded bytes but the one resident layer's.
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(streamed[r], 0u);
    EXPECT_EQ(streamed[r], sharded[r] / static_cast<size_t>(n) * static_cast<size_t>(n - 1)) << "rank " << r;
  }
}

namespace {

Qwen3VlTextOptions mapped(int resident, int slots) {
  Qwen3VlTextOptions o;
  o.resident_layers = resident;
  o.ring_slots = slots;
  o.park_source = ParkSource::mapped;
  return o;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// The procedural mini tower is a mapped f32 file (50 layers of width 64, 2 KV heads): a CPU f32 tower can read its
// streamed layers from it at each copy. Every state is the resident tower's, whatever the ring.
TEST(Qwen3VlTextMapped, LayersReadFromTheFileGiveTheResidentBits) {
  const std::shared_ptr<SafeTensors> f = procedural_qwen3vl_text_file(7);
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::from_file(f);
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(w);
  const int64_t n = 50;
  const std::vector<int32_t> ids = prompt(11, c.vocab_size);
  const std::vector<int64_t> all{1, n / 2, n}, early{3};
  const Qwen3VlTextModel resident(w, c, n, Qwen3VlTextOptions{});
  const Pass want_all = run(resident, ids, all, false), want_early = run(resident, ids, early, false);
  for (const auto& [r, slots] : {std::pair{0, 1}, std::pair{1, 3}, std::pair{25, 2}}) {
    const std::string what = fmt::format("{} resident, {} slots", r, slots);
    const Qwen3VlTextModel m(w, c, n, mapped(r, slots));
    expect_same(run(m, ids, all, false), want_all, what);
    expect_same(run(m, ids, early, false), want_early, what + ", short pass");
    expect_same(run(m, ids, all, false), want_all, what + ", after the short pass");
    const LayerStreamStats s = m.stream_stats();
    EXPECT_EQ(s.streamed, n - r) << what;
    EXPECT_EQ(s.parked_bytes, 0u) << what;
    EXPECT_GT(s.mapped_bytes, 0u) << what;
    EXPECT_EQ(m.bytes_sharded(), resident.bytes_sharded()) << what;
    EXPECT_EQ(m.bytes_streamed(), resident.bytes_sharded() / n * static_cast<size_t>(n - r)) << what;
  }
}

// Two ranks (threads): each maps its own unit's slices (q/k/v rows, o columns, up/gate rows, down columns).
TEST(Qwen3VlTextMapped, TensorParallelRanksMapTheirOwnSlices) {
  const std::shared_ptr<SafeTensors> f = procedural_qwen3vl_text_file(7);
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(Qwen3VlTextWeights::from_file(f));
  const int64_t n = 50;
  const std::vector<int32_t> ids = prompt(9, c.vocab_size);
  const std::vector<int64_t> keep{1, n};
  const Pass one =
      run(Qwen3VlTextModel(Qwen3VlTextWeights::from_file(f), c, n, Qwen3VlTextOptions{}), ids, keep, false);
  test::run_ranks(2, [&](Comm& comm) {
    const Qwen3VlTextWeights mine = Qwen3VlTextWeights::from_file(f);
    Qwen3VlTextOptions o = mapped(2, 2);
    o.comm = &comm;
    const Qwen3VlTextModel m(mine, c, n, o);
    EXPECT_EQ(m.layers_streamed(), n - 2);
    expect_same(run(m, ids, keep, false), one, fmt::format("rank {} vs 1 rank", comm.rank()));
  });
}

// Stored bytes that are not the tower's (f32 for an f64 tower), and procedural weights (no file), are refused before
// anything loads, naming the tensor.
TEST(Qwen3VlTextMapped, TheMappedSourceIsRefusedForBytesTheTowerDoesNotHold) {
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(7));
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(w);
  Qwen3VlTextOptions o = mapped(3, 2);
  o.precision = Precision::f64;
  o.host = HostMemory{32LL << 30, 2LL << 30};
  const std::string e = test::error_of([&] { Qwen3VlTextModel m(w, c, 6, o); });
  EXPECT_TRUE(has(e, "Qwen3-VL text tower: streaming its layers needs")) << e;
  EXPECT_TRUE(has(e, "'layers.0.self_attn.q_proj.weight' is stored f32, the tower computes in f64")) << e;
  const Qwen3VlTextWeights gen = Qwen3VlTextWeights::procedural(qwen3vl_text_parameters(c), "", 7, "procedural text");
  const std::string p = test::error_of([&] { Qwen3VlTextModel m(gen, c, 6, mapped(3, 2)); });
  EXPECT_TRUE(has(p, "procedural weights are generated where they load, not stored")) << p;
}
