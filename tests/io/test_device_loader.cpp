// The staged loader (io/device_loader.h) on the host, sharded checkpoints (io/weight_files.h) and the streamed
// safetensors writer: gathers of row ranges and column ranges against hand-indexed values, staging with buffers far
// smaller than a tensor, every error naming file and key. The GPU side is in tests/io/test_device_loader_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "io/device_loader.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "io/weight_files.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using h3::test::ScratchDir;

// Value i of a test tensor: distinct, exact in f32 and bf16 (small integers).
Tensor counting(Shape s, float base) {
  Tensor t(DType::f32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + static_cast<float>(i);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(DeviceLoader, ReadRowsGathersRowAndColumnRangesInOrder) {
  ScratchDir dir;
  const Tensor w = counting({7, 5}, 100);
  write_safetensors((dir / "w.safetensors").string(), {{"w", w}, {"v", counting({9}, 0)}});
  const SafeTensors f = SafeTensors::open((dir / "w.safetensors").string());
  DeviceLoader loader(Device::cpu, "test", {4096, 2, 8});  // 8-byte pieces: many parallel reads per tensor
  // Rows 5..6, then 0..1 and 3; columns 1..3: element (r, c) is 100 + 5 r + c.
  const Tensor g = loader.load(read_rows(f, "w", {{5, 7}, {0, 2}, {3, 4}}, {1, 4}), DType::f32);
  ASSERT_EQ(g.shape(), (Shape{5, 3}));
  const int64_t rows[5] = {5, 6, 0, 1, 3};
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(g.data<float>()[i * 3 + c], 100 + 5 * rows[i] + c + 1) << i << "," << c;
  // Whole rows of a 1-D tensor are its elements; neighbouring ranges merge into one span.
  const TensorRead r = read_rows(f, "v", {{2, 4}, {4, 6}});
  EXPECT_EQ(r.spans.size(), 1u);
  EXPECT_EQ(r.shape, (Shape{4}));
  const Tensor v = loader.load(r, DType::f32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v.data<float>()[i], 2 + i);
  EXPECT_EQ(read_tensor(f, "w").spans.size(), 1u);
  // Out of range, columns of a 1-D tensor: errors naming file and key.
  const std::string e1 = error_of([&] { (void)read_rows(f, "w", {{6, 8}}); });
  EXPECT_NE(e1.find("w.safetensors"), std::string::npos) << e1;
  EXPECT_NE(e1.find("'w'"), std::string::npos) << e1;
  EXPECT_NE(error_of([&] { (void)read_rows(f, "v", {{0, 1}}, {0, 1}); }).find("column range"), std::string::npos);
  const LoadReport& rep = loader.finish();
  EXPECT_EQ(rep.tensors, 2);
  EXPECT_EQ(rep.file_bytes, (15 + 4) * sizeof(float));
  EXPECT_NE(rep.summary().find("test: 2 tensors"), std::string::npos) << rep.summary();
}

TEST(DeviceLoader, ConvertsOnLoadAsTensorToDoes) {
  ScratchDir dir;
  Tensor f32 = counting({3, 4}, -5.25f);
  for (int64_t i = 0; i < f32.numel(); ++i) f32.data<float>()[i] *= 1.0009765625f;  // not bf16-exact
  const Tensor f16 = f32.to(DType::f16), bf16 = f32.to(DType::bf16);
  write_safetensors((dir / "d.safetensors").string(), {{"f32", f32}, {"f16", f16}, {"bf16", bf16}});
  const SafeTensors f = SafeTensors::open((dir / "d.safetensors").string());
  DeviceLoader loader(Device::cpu, "convert");
  EXPECT_TRUE(same_bytes(loader.load(f, "f32", DType::bf16), f32.to(DType::bf16)));
  EXPECT_TRUE(same_bytes(loader.load(f, "f16", DType::f32), f16.to(DType::f32)));
  EXPECT_TRUE(same_bytes(loader.load(f, "bf16", DType::f32), bf16.to(DType::f32)));
  EXPECT_TRUE(same_bytes(loader.load(f, "bf16", DType::bf16), bf16));
  // FP8 is quantized on the GPU only.
  EXPECT_NE(error_of([&] { (void)loader.load(f, "f32", DType::fp8_e4m3); }).find("GPU"), std::string::npos);
}

// NaN and Inf are found in the bytes as they are read (each parallel piece on its own) and refused naming the file,
// the loader's component, the key, the count and the first bad element of the stored tensor; a read that leaves
// the bad rows out passes, integers are never "non-finite", and the loader works on after a refusal.
TEST(DeviceLoader, RefusesNonFiniteValuesNamingFileKeyAndElement) {
  ScratchDir dir;
  Tensor w = counting({37, 29}, 1.0f);
  w.data<float>()[30 * 29 + 1] = -HUGE_VALF;
  w.data<float>()[5 * 29 + 3] = std::nanf("");
  Tensor ints(DType::i32, {3, 5});
  for (int64_t i = 0; i < ints.numel(); ++i) ints.data<int32_t>()[i] = 0x7f800000 + static_cast<int32_t>(i);
  const std::string path = (dir / "nan.safetensors").string();
  write_safetensors(path, {{"w", w}, {"w16", w.to(DType::bf16)}, {"h", w.to(DType::f16)}, {"ints", ints}});
  const SafeTensors f = SafeTensors::open(path);
  // Pieces of 1 KiB: the bad values lie in different pieces, read by different threads.
  DeviceLoader loader(Device::cpu, "test VAE", {4096, 2, 1024});
  for (const char* key : {"w", "w16", "h"}) {
    const std::string e = error_of([&] { (void)loader.load(f, key, DType::f32); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("test VAE weight '") + key + "' holds 2 non-finite values"), std::string::npos) << e;
    EXPECT_NE(e.find("the first at element 148;"), std::string::npos) << e;  // row 5, column 3
  }
  // Rows 30 then 5: the first bad element is still counted in the stored tensor.
  const std::string e = error_of([&] { (void)loader.load(read_rows(f, "w16", {{30, 31}, {5, 6}}), DType::bf16); });
  EXPECT_NE(e.find("holds 2 non-finite values (NaN or Inf), the first at element 148;"), std::string::npos) << e;
  const std::string one = error_of([&] { (void)loader.load(read_rows(f, "w", {{29, 31}}, {1, 9}), DType::f32); });
  EXPECT_NE(one.find("holds 1 non-finite value (NaN or Inf), the first at element 871;"), std::string::npos) << one;
  // Without rows 5 and 30 the values are clean; integers with float-looking bits load.
  const Tensor clean = loader.load(read_rows(f, "w", {{0, 5}, {6, 30}, {31, 37}}), DType::f32);
  EXPECT_EQ(clean.dim(0), 35);
  EXPECT_TRUE(same_bytes(loader.load(f, "ints", DType::i32), ints));
  // Turned off, the values pass as they are.
  DeviceLoader lenient(Device::cpu, "lenient", {4096, 2, 1024, false});
  EXPECT_TRUE(same_bytes(lenient.load(f, "w", DType::f32), w));
}

// The staging path (pinned buffers, queued copies, events) driven through device hooks that emulate a device in host
// memory, so that a machine without a GPU runs what a GPU load runs: a tensor of odd byte count (15 FP8 values)
// leaves the next one at an odd buffer offset, moved to an 8-byte boundary so that every staged part holds whole
// elements and is scanned on its own; NaN / Inf across 4 KiB buffers and at the very end are refused; the buffers
// rotate on after a refusal. In a child process: the hooks are process-wide. (tests/io/test_device_loader_gpu.cpp runs
// the same on the GPU.)
namespace {

void* emu_alloc(size_t n) {
  return std::malloc(n);
}
void emu_release(void* p, size_t) {
  std::free(p);
}
void emu_copy(void* d, bool, const void* s, bool, size_t n) {
  std::memcpy(d, s, n);
}
void emu_zero(void* p, size_t n) {
  std::memset(p, 0, n);
}
void* emu_event() {
  return new char;
}
void emu_event_release(void* e) {
  delete static_cast<char*>(e);
}
void emu_event_wait(void*) {}
void* emu_pinned(size_t n) {
  return std::malloc(n);
}
void emu_pinned_release(void* p) {
  std::free(p);
}

// 0 when every check holds; else the number of the first that failed (printed to stderr).
int staged_load_checks(const std::string& path) {
  DeviceHooks h;
  h.name = "host-emulated";
  h.alloc = emu_alloc;
  h.release = emu_release;
  h.copy = emu_copy;
  h.zero = emu_zero;
  h.event_record = emu_event;
  h.event_release = emu_event_release;
  h.pinned_alloc = emu_pinned;
  h.pinned_release = emu_pinned_release;
  h.copy_async = emu_copy;
  h.event_wait = emu_event_wait;
  register_device_hooks(h);
  const SafeTensors f = SafeTensors::open(path);
  DeviceLoader dev(Device::cuda, "emulated DiT", {4096, 3, 1024}), host(Device::cpu, "host");
  int check = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ++check;
    if (!ok) std::fprintf(stderr, "check %d failed: %s\n", check, what.c_str());
    return ok;
  };
  bool all = true;
  for (int rep = 0; rep < 2; ++rep) {
    all &= expect(same_bytes(dev.load(f, "odd", DType::fp8_e4m3).cpu(), host.load(f, "odd", DType::fp8_e4m3)),
                  "odd FP8 tensor staged as stored");
    for (const char* key : {"w", "w16"}) {
      const std::string e = error_of([&] { (void)dev.load(f, key, read_tensor(f, key).dtype); });
      all &= expect(
          e.find(std::string("emulated DiT weight '") + key + "' holds 2 non-finite values") != std::string::npos &&
              e.find("the first at element 1023;") != std::string::npos,
          std::string("refused ") + key + ": " + e);
    }
    const TensorRead r = read_rows(f, "w", {{20, 300}}, {1, 76});  // leaves both bad values out
    all &= expect(same_bytes(dev.load(r, DType::f32).cpu(), host.load(r, DType::f32)), "clean rows staged");
    all &= expect(same_bytes(dev.load(f, "clean", DType::f32).cpu(), host.load(f, "clean", DType::f32)),
                  "a later tensor staged after the refusals");
  }
  // An fp8 tensor's copies to the device and back carry its scale (values are stored x scale).
  const Tensor q =
      host.load(f, "odd", DType::fp8_e4m3).with_scale(Tensor::from(std::vector<float>{0.25f, 4.0f, 2.0f}, {3}));
  const Tensor qd = q.to_device(Device::cuda), qh = qd.cpu();
  all &= expect(qd.scale() && qd.scale()->on_device() && same_bytes(qd.scale()->cpu(), *q.scale()),
                "the scale travels to the device with its fp8 tensor");
  all &= expect(qh.scale() && !qh.scale()->on_device() && same_bytes(*qh.scale(), *q.scale()) && same_bytes(qh, q),
                "and back");
  const LoadReport& rep = dev.finish();
  all &= expect(rep.tensors == 6, "6 tensors loaded, refusals not counted: " + rep.summary());
  return all ? 0 : 1;
}

}  // namespace

TEST(DeviceLoaderDeathTest, StagedPartsHoldWholeElementsAndAreScanned) {
  ScratchDir dir;
  Tensor odd(DType::fp8_e4m3, {3, 5});
  for (int64_t i = 0; i < odd.numel(); ++i) static_cast<uint8_t*>(odd.raw())[i] = static_cast<uint8_t>(0x30 + i);
  Tensor w = counting({301, 77}, 0.5f);
  w.data<float>()[1023] = std::nanf("");  // the last value of the first 4 KiB of f32
  w.data<float>()[w.numel() - 1] = HUGE_VALF;
  const std::string path = (dir / "nan.safetensors").string();
  write_safetensors(path, {{"odd", odd}, {"w", w}, {"w16", w.to(DType::bf16)}, {"clean", counting({7, 9}, 3.0f)}});
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(std::_Exit(staged_load_checks(path)), testing::ExitedWithCode(0), "");
}

TEST(DeviceLoader, ReadsFromFilesWhoseNameIsGone) {
  // Procedural weights are mapped and unlinked at once: the loader reads them through the open descriptor.
  const auto f = procedural_safetensors({{"a.weight", {6, 10}}}, {}, 7, "loader-unlinked");
  DeviceLoader loader(Device::cpu, "unlinked");
  EXPECT_TRUE(same_bytes(loader.load(*f, "a.weight", DType::f32), procedural_tensor("a.weight", {6, 10}, 7)));
}

TEST(WeightFiles, ShardedFolderMapsShardsWhenTheirKeysAreRead) {
  ScratchDir dir;
  std::vector<std::pair<std::string, Tensor>> ts;
  for (int i = 0; i < 6; ++i) ts.emplace_back("layer." + std::to_string(i) + ".weight", counting({4, 8}, 10.0f * i));
  // 128-byte tensors, 300-byte shards: three shards of two tensors.
  write_sharded_safetensors(dir.path().string(), "model", ts, 300, {{"config", "{}"}});
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  std::ofstream(dir / "config.json") << R"({"answer": 42})";
  const auto w = WeightFiles::open(dir.path().string(), "test model");
  EXPECT_EQ(w->keys().size(), 6u);
  EXPECT_EQ(w->shard_paths().size(), 3u);
  EXPECT_EQ(w->shards_opened(), 0u);
  EXPECT_EQ(w->config_json(), R"({"answer": 42})");
  EXPECT_TRUE(same_bytes(w->get("layer.4.weight"), ts[4].second));
  EXPECT_EQ(w->shards_opened(), 1u);
  DeviceLoader loader(Device::cpu, "sharded");
  const Tensor rows = w->load(loader, "layer.1.weight", DType::f32, {{2, 4}});
  EXPECT_TRUE(same_bytes(rows, ts[1].second.rows(2, 4).clone()));
  EXPECT_EQ(w->shards_opened(), 2u);
  EXPECT_EQ(w->meta("config"), "{}");  // the first shard's metadata
  // A missing shard fails only when one of its keys is read, naming shard, key and index.
  fs::remove(dir / "model-00003-of-00003.safetensors");
  const auto w2 = WeightFiles::open(dir.path().string(), "test model");
  EXPECT_NO_THROW((void)w2->get("layer.0.weight"));
  const std::string e = error_of([&] { (void)w2->get("layer.5.weight"); });
  EXPECT_NE(e.find("model-00003-of-00003.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("layer.5.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors.index.json"), std::string::npos) << e;
}

TEST(WeightFiles, FoldersWithoutAnIndexAndBadIndexes) {
  ScratchDir dir;
  fs::create_directories(dir / "two");
  write_safetensors((dir / "two" / "a.safetensors").string(), {{"x", counting({2}, 0)}}, {{"config", "{\"c\":1}"}});
  write_safetensors((dir / "two" / "b.safetensors").string(), {{"y", counting({3}, 0)}});
  const auto w = WeightFiles::open((dir / "two").string(), "thing");
  EXPECT_TRUE(w->has("x"));
  EXPECT_TRUE(w->has("y"));
  EXPECT_EQ(w->config_json(), "");  // two files: no single file's metadata speaks for the folder
  write_safetensors((dir / "two" / "c.safetensors").string(), {{"x", counting({2}, 0)}});
  const std::string dup = error_of([&] { (void)WeightFiles::open((dir / "two").string(), "thing"); });
  EXPECT_NE(dup.find("'x'"), std::string::npos) << dup;
  EXPECT_NE(dup.find("without an index"), std::string::npos) << dup;

  fs::create_directories(dir / "bad");
  std::ofstream(dir / "bad" / "m.safetensors.index.json") << R"({"weight_map": {"k": "../m.safetensors"}})";
  EXPECT_NE(error_of([&] { (void)WeightFiles::open((dir / "bad").string(), "thing"); }).find("not a file of this"),
            std::string::npos);
  std::ofstream(dir / "bad" / "m.safetensors.index.json") << R"({"weight_map": {"k": "m.safetensors"}})";
  write_safetensors((dir / "bad" / "m.safetensors").string(), {{"other", counting({1}, 0)}});
  const auto wb = WeightFiles::open((dir / "bad").string(), "thing");
  EXPECT_NE(error_of([&] { (void)wb->get("k"); }).find("disagree"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)WeightFiles::open((dir / "none").string(), "thing"); }).find("does not exist"),
            std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_NE(error_of([&] { (void)WeightFiles::open((dir / "empty").string(), "thing"); }).find("no .safetensors"),
            std::string::npos);
}

// The file as the safetensors format lays it out: an 8-byte little-endian header length, the JSON header (keys
// sorted, data_offsets in write order, padded with spaces to a multiple of 8 bytes), the data in write order.
TEST(SafeTensorsWriter, StreamsTheSafetensorsLayout) {
  ScratchDir dir;
  const std::vector<std::pair<std::string, Tensor>> ts = {
      {"b", counting({3, 5}, 1)}, {"a", counting({4}, 2).to(DType::bf16)}, {"empty", Tensor(DType::i8, {0})}};
  std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[60,68],"dtype":"BF16","shape":[4]},)"
      R"("b":{"data_offsets":[0,60],"dtype":"F32","shape":[3,5]},"empty":{"data_offsets":[68,68],"dtype":"I8",)"
      R"("shape":[0]}})";
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string want(8, '\0');
  for (int i = 0; i < 8; ++i) want[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  want += header;
  for (const auto& [n, t] : ts) want.append(static_cast<const char*>(t.raw()), t.nbytes());
  {
    std::vector<SafeTensorsEntry> entries;
    for (const auto& [n, t] : ts) entries.push_back({n, t.dtype(), t.shape()});
    SafeTensorsWriter w((dir / "stream.safetensors").string(), entries, {{"k", "v"}}, 16);  // a 16-byte queue
    for (const auto& [n, t] : ts) w.write(n, t);
    w.finish();
    EXPECT_EQ(w.file_bytes(), want.size());
  }
  EXPECT_EQ(read_all(dir / "stream.safetensors"), want);
  write_safetensors((dir / "whole.safetensors").string(), ts, {{"k", "v"}});
  EXPECT_EQ(read_all(dir / "whole.safetensors"), want);
  // Wrong order, dtype or shape: refused, naming both; abandoned files leave nothing behind.
  {
    SafeTensorsWriter w((dir / "bad.safetensors").string(), {{"x", DType::f32, {2}}, {"y", DType::f32, {1}}});
    const std::string e = error_of([&] { w.write("y", counting({1}, 0)); });
    EXPECT_NE(e.find("'x'"), std::string::npos) << e;
    EXPECT_NE(e.find("'y'"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { w.write("x", counting({3}, 0)); }).find("[3]"), std::string::npos);
    w.write("x", counting({2}, 0));
    EXPECT_NE(error_of([&] { w.finish(); }).find("1 of the 2"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(dir / "bad.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "bad.safetensors.partial"));
}

TEST(ProceduralWeights, GetIsTheFormulaAndSpecsParse) {
  const ProceduralWeights w({{"x.weight", {3, 4}}, {"y.norm.weight", {5}}, {"f.filter", {1, 1, 2}}}, 11, "p",
                            [](const std::string& n, const Shape& s) {
                              return n.ends_with(".filter") ? std::optional<Tensor>(Tensor(DType::f32, s))
                                                            : std::nullopt;
                            });
  EXPECT_TRUE(same_bytes(w.get("x.weight"), procedural_tensor("x.weight", {3, 4}, 11)));
  EXPECT_TRUE(same_bytes(w.get("y.norm.weight"), procedural_tensor("y.norm.weight", {5}, 11)));
  EXPECT_EQ(w.get("f.filter").data<float>()[1], 0.0f);
  DeviceLoader host(Device::cpu, "p");
  EXPECT_TRUE(same_bytes(w.load(host, "x.weight", DType::bf16, {{1, 3}}),
                         procedural_tensor("x.weight", {3, 4}, 11).rows(1, 3).clone().to(DType::bf16)));
  EXPECT_EQ(host.finish().generated, 1);
  EXPECT_NE(error_of([&] { (void)w.get("nope"); }).find("'nope'"), std::string::npos);

  EXPECT_EQ(parse_procedural_spec("procedural:full", "--x", {"mini", "full"}).name, "full");
  EXPECT_EQ(parse_procedural_spec("procedural:full", "--x", {"mini", "full"}).seed, kDefaultProceduralSeed);
  EXPECT_EQ(parse_procedural_spec("procedural:mini:seed=42", "--x", {"mini"}).seed, 42u);
  for (const char* bad : {"procedural:big", "procedural:mini:seed=", "procedural:mini:seed=-1",
                          "procedural:mini:seed=7x", "procedural:mini:seed=7:seed=8", "procedural:full"}) {
    const std::string e = error_of([&] { (void)parse_procedural_spec(bad, "--x", {"mini"}); });
    EXPECT_NE(e.find("--x"), std::string::npos) << bad << ": " << e;
  }
}
