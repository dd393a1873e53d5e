// safetensors reader/writer: round trips for every dtype, one hand-crafted file per validation error, and a
// seeded corruption run showing that no mutated header gets past safetensors_parse as anything but a clean
// parse or an h3::Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "support/scratch_dir.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

using h3::test::ScratchDir;

const DType kAllDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3,
                            DType::i64, DType::i32, DType::i8,   DType::u8};

// A tensor whose bytes follow a pattern that depends on `salt`, so two tensors never share contents.
Tensor patterned(DType dt, Shape shape, unsigned salt) {
  Tensor t(dt, std::move(shape));
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>((i * 131 + salt * 29 + 7) & 0xff);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// The bytes of a safetensors file with this header text and `data_bytes` bytes of data.
std::string craft(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Opens `file` expecting an h3::Error whose message names every one of `needles`.
void expect_open_error(const fs::path& file, const std::vector<std::string>& needles) {
  try {
    SafeTensors::open(file.string());
    ADD_FAILURE() << "opened without error: " << file;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-h3 exception: " << e.what();
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Round trips

TEST(SafeTensorsRoundTrip, EveryDtypeWithMetadata) {
  ScratchDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors;
  unsigned salt = 0;
  for (DType dt : kAllDTypes) {
    const std::string n(dtype_name(dt));
    tensors.emplace_back(n + ".matrix", patterned(dt, {3, 5}, ++salt));
    tensors.emplace_back(n + ".vector", patterned(dt, {7}, ++salt));
    tensors.emplace_back(n + ".empty", patterned(dt, {0, 4}, ++salt));
  }
  tensors.emplace_back("scalar", patterned(DType::f32, {}, ++salt));
  tensors.emplace_back("cube", patterned(DType::bf16, {2, 3, 5}, ++salt));
  const std::map<std::string, std::string> meta = {
      {"config", R"({"num_layers": 3})"}, {"note", "unicode: \xc3\xa9\xe2\x82\xac"}, {"empty", ""}};
  const fs::path file = dir / "all.safetensors";
  write_safetensors(file.string(), tensors, meta);

  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"all.safetensors"}) << "a .partial file was left behind";
  SafeTensors st = SafeTensors::open(file.string());
  EXPECT_EQ(st.path(), file.string());
  EXPECT_EQ(st.metadata(), meta);
  EXPECT_EQ(st.meta("note"), meta.at("note"));
  EXPECT_EQ(st.meta("absent"), "");
  ASSERT_EQ(st.keys().size(), tensors.size());
  size_t total = 0;
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.has(name));
    const TensorInfo& ti = st.info(name);
    EXPECT_EQ(ti.dtype, t.dtype());
    EXPECT_EQ(ti.shape, t.shape());
    EXPECT_EQ(ti.end - ti.begin, t.nbytes());
    Tensor back = st.get(name);
    EXPECT_TRUE(same_bytes(back, t));
    total += t.nbytes();
  }
  EXPECT_EQ(st.data_bytes(), total);
  // keys() is in data order, which the writer makes the order of the list.
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].second.nbytes() != 0) {
      EXPECT_EQ(st.keys()[i], tensors[i].first);
    }
  // The header is padded so the data region starts 8-aligned.
  const std::string raw = read_all(file);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(SafeTensorsRoundTrip, EmptyFileAndOverwrite) {
  ScratchDir dir;
  const fs::path file = dir / "x.safetensors";
  write_safetensors(file.string(), {});
  SafeTensors empty = SafeTensors::open(file.string());
  EXPECT_TRUE(empty.keys().empty());
  EXPECT_TRUE(empty.metadata().empty());
  EXPECT_EQ(empty.data_bytes(), 0u);

  // Writing again replaces the file in place.
  Tensor t = patterned(DType::i32, {4}, 3);
  write_safetensors(file.string(), {{"t", t}});
  SafeTensors st = SafeTensors::open(file.string());
  EXPECT_TRUE(same_bytes(st.get("t"), t));
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"x.safetensors"});
}

TEST(SafeTensorsRoundTrip, ViewsOutliveTheReader) {
  ScratchDir dir;
  const fs::path file = dir / "v.safetensors";
  Tensor t = patterned(DType::f32, {9, 3}, 11);
  write_safetensors(file.string(), {{"w", t}});
  Tensor view;
  {
    SafeTensors st = SafeTensors::open(file.string());
    view = st.get("w");
  }
  EXPECT_TRUE(same_bytes(view, t));
}

TEST(SafeTensorsRoundTrip, MisalignedDataIsCopied) {
  // A header whose length leaves the data region at an odd offset (legal in the format): get() must still
  // return the right values.
  ScratchDir dir;
  std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  while ((8 + header.size()) % 4 != 1) header += ' ';
  const float vals[3] = {1.5f, -2.25f, 1e-3f};
  std::string bytes = le64(header.size()) + header + std::string(reinterpret_cast<const char*>(vals), 12);
  write_all(dir / "odd.safetensors", bytes);
  SafeTensors st = SafeTensors::open((dir / "odd.safetensors").string());
  Tensor a = st.get("a");
  ASSERT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.data<float>()[0], 1.5f);
  EXPECT_EQ(a.data<float>()[1], -2.25f);
  EXPECT_EQ(a.data<float>()[2], 1e-3f);
}

TEST(SafeTensorsWriter, MissingFolderThrowsAndLeavesNothing) {
  ScratchDir dir;
  const fs::path file = dir.path() / "no-such-folder" / "w.safetensors";
  try {
    write_safetensors(file.string(), {{"t", patterned(DType::f32, {2}, 1)}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "no-such-folder"));
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(SafeTensorsWriter, BadNamesThrowAndLeaveNothing) {
  ScratchDir dir;
  const fs::path file = dir / "w.safetensors";
  Tensor t = patterned(DType::u8, {2}, 1);
  EXPECT_THROW(write_safetensors(file.string(), {{"__metadata__", t}}), Error);
  EXPECT_THROW(write_safetensors(file.string(), {{"a", t}, {"a", t}}), Error);
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(SafeTensorsReader, UnknownKeyNamesFileAndKey) {
  ScratchDir dir;
  const fs::path file = dir / "k.safetensors";
  write_safetensors(file.string(), {{"present", patterned(DType::i8, {3}, 2)}});
  SafeTensors st = SafeTensors::open(file.string());
  EXPECT_FALSE(st.has("absent"));
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0)
        st.info("absent");
      else
        st.get("absent");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("absent"), std::string::npos) << msg;
    }
  }
  expect_open_error(dir / "does-not-exist.safetensors", {(dir / "does-not-exist.safetensors").string()});
  expect_open_error(dir.path(), {dir.path().string()});  // a folder is not a file
}

// ---------------------------------------------------------------------------------------------------------------
// Validation: one hand-crafted file per error

TEST(SafeTensorsValidation, ShorterThanLengthField) {
  ScratchDir dir;
  for (size_t n : {0, 1, 7}) {
    const fs::path f = dir / ("short" + std::to_string(n) + ".safetensors");
    write_all(f, std::string(n, '\x01'));
    expect_open_error(f, {f.string()});
  }
}

TEST(SafeTensorsValidation, HeaderLengthBeyondFile) {
  ScratchDir dir;
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  const fs::path f = dir / "long.safetensors";
  write_all(f, le64(header.size() + 2) + header + "x");  // claims two bytes more than there are
  expect_open_error(f, {f.string(), "header length"});
  const fs::path g = dir / "huge.safetensors";
  write_all(g, le64(~uint64_t{0}) + header + "x");
  expect_open_error(g, {g.string()});
  const fs::path h = dir / "overflow.safetensors";  // 8 + n wraps around
  write_all(h, le64(~uint64_t{0} - 4) + header + "x");
  expect_open_error(h, {h.string()});
}

TEST(SafeTensorsValidation, TruncatedData) {
  ScratchDir dir;
  const fs::path f = dir / "t.safetensors";
  write_safetensors(f.string(), {{"first", patterned(DType::f32, {4}, 1)}, {"last", patterned(DType::f16, {6}, 2)}});
  std::string bytes = read_all(f);
  bytes.resize(bytes.size() - 3);
  write_all(f, bytes);
  expect_open_error(f, {f.string(), "'last'", "truncated"});
}

TEST(SafeTensorsValidation, HandCraftedHeaders) {
  struct Case {
    const char* what;
    std::string header;
    size_t data_bytes;
    std::vector<std::string> needles;  // besides the path
  };
  const std::vector<Case> cases = {
      {"empty header", "", 0, {"JSON"}},
      {"not JSON", R"({"w": {"dtype": "F32",)", 8, {"JSON"}},
      {"garbage", "\xff\xfe\x00garbage", 8, {"JSON"}},
      {"array header", "[1, 2, 3]", 0, {"object"}},
      {"string header", R"("hello")", 0, {"object"}},
      {"entry not an object", R"({"w": 5})", 0, {"'w'"}},
      {"missing dtype", R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8, {"'w'", "dtype"}},
      {"missing shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8, {"'w'", "shape"}},
      {"missing data_offsets", R"({"w": {"dtype": "F32", "shape": [2]}})", 8, {"'w'", "data_offsets"}},
      {"non-string dtype", R"({"w": {"dtype": 7, "shape": [2], "data_offsets": [0, 8]}})", 8, {"'w'", "dtype"}},
      {"unknown dtype", R"({"w": {"dtype": "F128", "shape": [2], "data_offsets": [0, 32]}})", 32, {"'w'", "F128"}},
      {"lower-case dtype", R"({"w": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"shape not an array", R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"negative shape", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"fractional shape", R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"float-typed shape", R"({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"string shape", R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"huge dimension", R"({"w": {"dtype": "U8", "shape": [1000000000000000], "data_offsets": [0, 8]}})", 8, {"'w'"}},
      {"overflowing shape",
       R"({"w": {"dtype": "F64", "shape": [281474976710656, 281474976710656], "data_offsets": [0, 8]}})",
       8,
       {"'w'"}},
      {"one offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8]}})", 8, {"'w'"}},
      {"negative offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 8, {"'w'"}},
      {"reversed offsets", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8, {"'w'", "reversed"}},
      {"data past the end",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
       8,
       {"'w'", "truncated"}},
      {"byte count mismatch",
       R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
       8,
       {"'w'", "12 bytes"}},
      {"byte count mismatch, empty", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 4]}})", 4, {"'w'"}},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12,
       {"'a'", "'b'", "overlap"}},
      {"overlap, same range",
       R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})",
       8,
       {"'a'", "'b'", "overlap"}},
      {"overlap, contained",
       R"({"big": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
           "small": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]},
           "next": {"dtype": "U8", "shape": [4], "data_offsets": [10, 14]}})",
       16,
       {"overlap"}},
      {"non-string metadata", R"({"__metadata__": {"n": 1}})", 0, {"'n'"}},
      {"metadata not an object", R"({"__metadata__": "x"})", 0, {"__metadata__"}},
      {"unexpected field",
       R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "extra": 1}})",
       8,
       {"'w'", "extra"}},
  };
  ScratchDir dir;
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path f = dir / ("case" + std::to_string(i++) + ".safetensors");
    write_all(f, craft(c.header, c.data_bytes));
    std::vector<std::string> needles = c.needles;
    needles.push_back(f.string());
    expect_open_error(f, needles);
  }
}

TEST(SafeTensorsValidation, AcceptsEdgeCases) {
  // Legal but unusual: zero-size tensors sharing an offset, an empty metadata object, an unpadded header,
  // data after the last tensor, whitespace around the JSON.
  ScratchDir dir;
  const std::string h =
      "  \n{\"__metadata__\": {}, \"e1\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
      "\"e2\": {\"dtype\": \"BF16\", \"shape\": [3, 0], \"data_offsets\": [4, 4]},"
      "\"w\": {\"data_offsets\": [0, 4], \"shape\": [2], \"dtype\": \"F16\"}}\t";
  const fs::path f = dir / "edge.safetensors";
  write_all(f, craft(h, 9));
  SafeTensors st = SafeTensors::open(f.string());
  EXPECT_EQ(st.keys().size(), 3u);
  EXPECT_EQ(st.get("e2").numel(), 0);
  EXPECT_EQ(st.get("w").dtype(), DType::f16);
  EXPECT_EQ(st.data_bytes(), 9u);
}

TEST(SafeTensorsValidation, DeeplyNestedHeaderDoesNotOverflowTheStack) {
  ScratchDir dir;
  const size_t depth = 200000;
  const std::string header = "{\"w\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  const fs::path f = dir / "deep.safetensors";
  write_all(f, craft(header, 0));
  // Depth is measured before parsing, so the error names the file and the rule, not a key.
  expect_open_error(f, {f.string(), "nested deeper"});
}

// ---------------------------------------------------------------------------------------------------------------
// Corruption: seeded mutations of a valid file, each parsed in memory.

namespace {

struct CorruptionStats {
  int parsed = 0;
  int rejected = 0;
  int wrong = 0;  // another exception type, or a parse that broke an invariant
  std::string first_wrong;
};

// What a successful parse of a file of `size` bytes got wrong, or "" (the invariants safetensors_parse promises).
std::string parse_problem(const std::map<std::string, TensorInfo>& infos, const std::vector<std::string>& keys,
                          size_t size, size_t data_offset) {
  std::string problem;
  if (data_offset < 8 || data_offset > size) problem = "data offset outside the file";
  if (keys.size() != infos.size()) problem = "keys and infos disagree";
  const size_t data_size = size - std::min(size, data_offset);
  size_t prev_begin = 0;
  for (const auto& k : keys) {
    auto it = infos.find(k);
    if (it == infos.end()) {
      problem = "key without info: " + k;
      break;
    }
    const TensorInfo& ti = it->second;
    if (ti.begin > ti.end || ti.end > data_size) problem = "tensor '" + k + "' outside the data region";
    if (ti.begin < prev_begin) problem = "keys not in data order";
    prev_begin = ti.begin;
    int64_t numel = 1;
    for (int64_t d : ti.shape) numel *= d;
    if (static_cast<size_t>(numel) * dtype_size(ti.dtype) != ti.end - ti.begin)
      problem = "tensor '" + k + "' byte count disagrees with its shape";
  }
  return problem;
}

// Mutates copies of `base` (a valid safetensors file) `count` times with a fixed seed. The parser never reads
// the data region, so only the first 8 + header + slack bytes are restored between mutants; data bytes
// shifted by an insertion or deletion are simply different data.
CorruptionStats corrupt_and_parse(const std::vector<std::byte>& base, int count, uint64_t seed) {
  CorruptionStats stats;
  uint64_t n0 = 0;
  std::memcpy(&n0, base.data(), 8);
  const size_t head_end = 8 + static_cast<size_t>(n0);
  const size_t slack = 64;
  const size_t window = std::min(head_end + slack, base.size() + slack);
  std::vector<std::byte> arena(base.size() + slack, std::byte{0});
  std::copy(base.begin(), base.end(), arena.begin());
  std::vector<std::byte> pristine(arena.begin(), arena.begin() + static_cast<std::ptrdiff_t>(window));

  std::mt19937_64 rng(seed);
  auto pick = [&](size_t lo, size_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  static const char kJsonish[] = "{}[]\",:0123456789-+.eE \t\\nulltruefalseFUBI_";
  std::vector<size_t> digits;
  for (size_t i = 8; i < head_end; ++i)
    if (std::isdigit(static_cast<unsigned char>(base[i]))) digits.push_back(i);

  for (int iter = 0; iter < count; ++iter) {
    std::copy(pristine.begin(), pristine.end(), arena.begin());
    size_t size = base.size();
    size_t head = head_end;  // where the header ends in this mutant
    auto set_length = [&](uint64_t v) { std::memcpy(arena.data(), &v, 8); };
    const int rounds = pick(0, 3) == 0 ? 2 : 1;
    for (int r = 0; r < rounds; ++r) {
      switch (pick(0, 6)) {
        case 0: {  // flip bits in the header
          for (size_t k = pick(1, 8); k > 0; --k) arena[pick(8, head - 1)] ^= std::byte{uint8_t(1u << pick(0, 7))};
          break;
        }
        case 1: {  // overwrite header bytes with JSON-ish characters or anything
          for (size_t k = pick(1, 4); k > 0; --k)
            arena[pick(8, head - 1)] =
                pick(0, 3) == 0 ? std::byte(uint8_t(pick(0, 255))) : std::byte(kJsonish[pick(0, sizeof(kJsonish) - 2)]);
          break;
        }
        case 2: {  // change digits: shapes and offsets stay numbers, most headers stay valid JSON
          for (size_t k = pick(1, 3); k > 0 && !digits.empty(); --k)
            arena[digits[pick(0, digits.size() - 1)]] = std::byte(uint8_t('0' + pick(0, 9)));
          break;
        }
        case 3: {  // truncate
          if (size > 0) size = pick(0, size - 1);
          break;
        }
        case 4: {  // a new header length
          const uint64_t n = head - 8;
          switch (pick(0, 4)) {
            case 0:
              set_length(rng());
              break;
            case 1:
              set_length(n + pick(0, 16) - 8);
              break;
            case 2:
              set_length(uint64_t(size) - 8 + pick(0, 16) - 8);
              break;
            case 3:
              set_length(~uint64_t{0} - pick(0, 16));
              break;
            default:
              set_length(pick(0, 64));
              break;
          }
          break;
        }
        case 5: {  // insert bytes into the JSON, keeping the length right half of the time
          const size_t k = pick(1, 16), at = pick(8, head);
          std::memmove(arena.data() + at + k, arena.data() + at, window - at - k);
          for (size_t j = 0; j < k; ++j) arena[at + j] = std::byte(kJsonish[pick(0, sizeof(kJsonish) - 2)]);
          size = std::min(size + k, arena.size());
          if (pick(0, 1)) {
            head += k;
            set_length(head - 8);
          }
          break;
        }
        default: {  // delete bytes from the JSON, keeping the length right half of the time
          const size_t k = std::min(pick(1, 16), head - 8), at = pick(8, head - k);
          std::memmove(arena.data() + at, arena.data() + at + k, window - at - k);
          size -= std::min(size, k);
          if (pick(0, 1)) {
            head -= k;
            set_length(head - 8);
          }
          break;
        }
      }
      if (head < 9) break;
    }

    std::map<std::string, TensorInfo> infos;
    std::vector<std::string> keys;
    std::map<std::string, std::string> metadata;
    size_t data_offset = 0;
    try {
      safetensors_parse("mutant", arena.data(), size, infos, keys, metadata, data_offset);
    } catch (const Error&) {
      ++stats.rejected;
      continue;
    } catch (const std::exception& e) {
      if (stats.wrong++ == 0) stats.first_wrong = "iteration " + std::to_string(iter) + ": " + e.what();
      continue;
    } catch (...) {
      if (stats.wrong++ == 0) stats.first_wrong = "iteration " + std::to_string(iter) + ": unknown exception";
      continue;
    }
    ++stats.parsed;
    const std::string problem = parse_problem(infos, keys, size, data_offset);
    if (!problem.empty() && stats.wrong++ == 0)
      stats.first_wrong = "iteration " + std::to_string(iter) + ": " + problem;
  }
  return stats;
}

std::vector<std::byte> bytes_of(const fs::path& p) {
  const std::string s = read_all(p);
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

// `count` seeded mutants of `base` (named `what` in the printed line) parsed and timed; none may be taken wrongly.
CorruptionStats expect_no_wrong_parses(const std::string& what, const std::vector<std::byte>& base, int count,
                                       uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  const CorruptionStats s = corrupt_and_parse(base, count, seed);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ corrupt  ] %s (%zu bytes): %d mutants, %d parsed, %d rejected, %d wrong, %.2f s\n", what.c_str(),
              base.size(), count, s.parsed, s.rejected, s.wrong, secs);
  EXPECT_EQ(s.wrong, 0) << s.first_wrong;
  return s;
}

}  // namespace

TEST(SafeTensorsCorruption, SeededMutationsOfAWrittenFile) {
  ScratchDir dir;
  const fs::path file = dir / "base.safetensors";
  write_safetensors(file.string(),
                    {{"blocks.0.attn.qkv_proj.weight", patterned(DType::bf16, {12, 5}, 1)},
                     {"blocks.0.norm1.weight", patterned(DType::f32, {5}, 2)},
                     {"empty", patterned(DType::f16, {0, 3}, 3)},
                     {"ids", patterned(DType::i64, {3}, 4)},
                     {"fp8", patterned(DType::fp8_e4m3, {2, 7}, 5)},
                     {"bytes", patterned(DType::u8, {11}, 6)}},
                    {{"config", R"({"num_layers": 1, "hidden_size": 5})"}, {"note", "qkv blocked"}});
  const CorruptionStats s = expect_no_wrong_parses("written file", bytes_of(file), 4000, 20261129);
  EXPECT_EQ(s.parsed + s.rejected + s.wrong, 4000);
  // Both outcomes must actually occur, or the mutations test nothing.
  EXPECT_GT(s.parsed, 40);
  EXPECT_GT(s.rejected, 400);
}

TEST(SafeTensorsCorruption, SeededMutationsOfTheGoldenDit) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/dit-mini.safetensors";
  if (!fs::exists(path)) GTEST_SKIP() << "golden file missing: " << path;
  const CorruptionStats s = expect_no_wrong_parses("dit-mini", bytes_of(path), 3000, 7);
  EXPECT_GT(s.parsed, 30);
  EXPECT_GT(s.rejected, 300);
}
