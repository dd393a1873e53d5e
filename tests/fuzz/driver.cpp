// A standalone driver for the fuzz targets (the LLVMFuzzerTestOneInput functions beside it), so CI can fuzz
// with the project's own compiler and build: every seed is run once, then randomly chosen seeds are mutated
// (bit flips, random bytes, inserted JSON/number tokens, deleted or repeated ranges, splices of two seeds,
// truncation) and run until the time is up. No coverage feedback: a deeper search is libFuzzer's job
// (README.md builds the same targets with clang's libFuzzer and sanitizers).
//
// usage: fuzz_TARGET [--seconds S] [--max-len N] [--rng N] SEED_FILE_OR_DIR...
// Prints "fuzz TARGET: N executions in S s, 0 failures". An exception other than the target's own rejection
// escaping, or a crash, fails the run; the input is saved first as ./fuzz-crash-TARGET.bin.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

std::string g_target = "target";
const Bytes* g_current = nullptr;

void save_current() {
  if (!g_current) return;
  const std::string name = "fuzz-crash-" + g_target + ".bin";
  std::ofstream out(name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(g_current->data()), static_cast<std::streamsize>(g_current->size()));
  std::fprintf(stderr, "fuzz %s: failing input (%zu bytes) saved as %s\n", g_target.c_str(), g_current->size(),
               name.c_str());
}

void run_one(const Bytes& in) {
  g_current = &in;
  try {
    LLVMFuzzerTestOneInput(in.data(), in.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz %s: an exception escaped: %s\n", g_target.c_str(), e.what());
    save_current();
    std::exit(1);
  }
  g_current = nullptr;
}

const char* const kTokens[] = {"{",
                               "}",
                               "[",
                               "]",
                               "\"",
                               ",",
                               ":",
                               "0",
                               "-1",
                               "4294967296",
                               "1e999",
                               "NaN",
                               "null",
                               "true",
                               "\\u",
                               "\\\\",
                               "\"dtype\"",
                               "\"shape\"",
                               "\"F32\"",
                               "\"I8\"",
                               "\"U8\"",
                               "\"data_offsets\"",
                               "\"__metadata__\"",
                               "\"format\"",
                               "\"prompt\"",
                               "\"size\"",
                               "\"seconds\"",
                               "\"frames\"",
                               "\"steps\"",
                               "\"seed\"",
                               "18446744073709551616",
                               "\xff\xfe",
                               "\x00",
                               "IHDR",
                               "IDAT",
                               "RIFF",
                               "fmt ",
                               "data"};

Bytes mutate(const Bytes& a, const Bytes& b, std::mt19937_64& rng, size_t max_len) {
  Bytes out = a;
  const int n_ops = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n_ops; ++k) {
    const size_t n = out.size();
    switch (rng() % 8) {
      case 0:  // flip a bit
        if (n) out[rng() % n] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // a random byte
        if (n) out[rng() % n] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // insert a token
        const char* t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
        const size_t at = n ? rng() % (n + 1) : 0;
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), t, t + std::max<size_t>(1, std::strlen(t)));
        break;
      }
      case 3:  // delete a range
        if (n > 1) {
          const size_t at = rng() % n, len = 1 + rng() % std::min<size_t>(n - at, 64);
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + len));
        }
        break;
      case 4:  // repeat a range (nesting, long runs)
        if (n) {
          const size_t at = rng() % n, len = 1 + rng() % std::min<size_t>(n - at, 16), times = 1 + rng() % 64;
          Bytes piece(out.begin() + static_cast<std::ptrdiff_t>(at),
                      out.begin() + static_cast<std::ptrdiff_t>(at + len));
          for (size_t t = 0; t < times; ++t)
            out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), piece.begin(), piece.end());
        }
        break;
      case 5:  // splice with another seed
        if (!b.empty()) {
          const size_t cut = n ? rng() % n : 0, from = rng() % b.size();
          out.resize(cut);
          out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(from), b.end());
        }
        break;
      case 6:  // truncate
        if (n) out.resize(rng() % n);
        break;
      default:  // overwrite 1, 2, 4 or 8 bytes with a boundary value
        if (n >= 8) {
          const uint64_t vals[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0xffffffff, ~0ull, 1ull << 63};
          const uint64_t v = vals[rng() % (sizeof(vals) / sizeof(vals[0]))];
          const size_t w = size_t{1} << (rng() % 4), at = rng() % (n - w + 1);
          std::memcpy(out.data() + at, &v, w);
        }
    }
    if (out.size() > max_len) out.resize(max_len);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 30;
  size_t max_len = 1 << 16;
  uint64_t seed = 20261201;
  std::vector<Bytes> pool;
  g_target = fs::path(argv[0]).filename().string();
  if (g_target.rfind("fuzz_", 0) == 0) g_target = g_target.substr(5);
  std::set_terminate([] {
    save_current();
    std::abort();
  });
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--max-len" && i + 1 < argc) {
      max_len = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (a == "--rng" && i + 1 < argc) {
      seed = static_cast<uint64_t>(std::atoll(argv[++i]));
    } else {
      std::vector<fs::path> files;
      if (fs::is_directory(a)) {
        for (const auto& e : fs::directory_iterator(a))
          if (e.is_regular_file()) files.push_back(e.path());
      } else {
        files.push_back(a);
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        pool.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      }
    }
  }
  if (pool.empty()) {
    std::fprintf(stderr, "fuzz %s: no seeds given\n", g_target.c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t runs = 0;
  for (const Bytes& s : pool) {
    run_one(s);
    ++runs;
  }
  const size_t seeds = pool.size();
  std::mt19937_64 rng(seed);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (elapsed() < seconds) {
    const Bytes in = mutate(pool[rng() % pool.size()], pool[rng() % pool.size()], rng, max_len);
    run_one(in);
    ++runs;
    // Keep some mutants as new starting points (bounded), so mutations compound.
    if (rng() % 16 == 0) {
      if (pool.size() < seeds + 256)
        pool.push_back(in);
      else
        pool[seeds + rng() % 256] = in;
    }
  }
  std::printf("fuzz %s: %llu executions in %.1f s from %zu seeds, 0 failures\n", g_target.c_str(),
              static_cast<unsigned long long>(runs), elapsed(), seeds);
  return 0;
}
