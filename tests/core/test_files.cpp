// Input and output checks made before any work (core/files.h): an output that cannot be written, or that would
// replace an input, is refused at once rather than at the end of a run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "support/error_of.h"
#include "support/scratch_dir.h"

namespace fs = std::filesystem;
using h3::test::error_of;

TEST(Files, OutputFolderMustTakeANewFile) {
  h3::test::ScratchDir dir;
  const std::string ok = (dir / "out.mp4").string();
  EXPECT_NO_THROW(h3::check_output_file(ok, "-o"));
  EXPECT_FALSE(fs::exists(ok + ".partial")) << "the probe is removed again";
  EXPECT_FALSE(fs::exists(ok));
  // A folder that takes no file, for root too (procfs); a mode-0555 folder for other users.
  std::string e = error_of([] { h3::check_output_file("/proc/self/h3-out.mp4", "-o"); });
  EXPECT_NE(e.find("-o /proc/self/h3-out.mp4: cannot write a file in /proc/self"), std::string::npos) << e;
  if (::geteuid() != 0) {
    const fs::path ro = dir / "ro";
    fs::create_directory(ro);
    ::chmod(ro.c_str(), 0555);
    e = error_of([&] { h3::check_output_file((ro / "out.mp4").string(), "-o"); });
    EXPECT_NE(e.find("cannot write a file in"), std::string::npos) << e;
    ::chmod(ro.c_str(), 0755);
  }
  // An existing PATH.partial (a writer's, or an earlier run's) is left alone.
  std::ofstream(ok + ".partial") << "x";
  EXPECT_NO_THROW(h3::check_output_file(ok, "-o"));
  EXPECT_TRUE(fs::exists(ok + ".partial"));
}

TEST(Files, OutputThatWouldReplaceAnInputIsRefused) {
  h3::test::ScratchDir dir;
  const std::string in = (dir / "model.safetensors").string();
  std::ofstream(in) << "x";
  fs::create_directory(dir / "folder");
  fs::create_symlink(in, dir / "link.safetensors");
  std::string e = error_of([&] { h3::check_output_not_input(in, {in}, "-o"); });
  EXPECT_NE(e.find("is the input"), std::string::npos) << e;
  e = error_of([&] { h3::check_output_not_input((dir / "link.safetensors").string(), {in}, "-o"); });
  EXPECT_NE(e.find("is the input"), std::string::npos) << "the same file by another name: " << e;
  e = error_of([&] { h3::check_output_not_input((dir / "folder/../model.safetensors").string(), {in}, "-o"); });
  EXPECT_NE(e.find("is the input"), std::string::npos) << e;
  e = error_of(
      [&] { h3::check_output_not_input((dir / "folder/x.safetensors").string(), {(dir / "folder").string()}, "-o"); });
  EXPECT_NE(e.find("inside the input folder"), std::string::npos) << e;
  EXPECT_NO_THROW(h3::check_output_not_input((dir / "other.safetensors").string(),
                                             {in, (dir / "folder").string(), "procedural:mini", ""}, "-o"));
  EXPECT_NO_THROW(
      h3::check_output_not_input((dir / "folderx.safetensors").string(), {(dir / "folder").string()}, "-o"));
}

TEST(Files, ConvertRefusesToOverwriteItsInput) {
  // The reproducer end to end: `h3 convert F -o F` replaced F with a part of itself and exited 0.
  h3::test::ScratchDir dir;
  const std::string f = (dir / "mini.safetensors").string();
  const std::string make = std::string(H3_BIN_DIR) + "/h3 --log-level error convert procedural:mini -o " + f;
  ASSERT_EQ(std::system(make.c_str()), 0);
  const auto size = fs::file_size(f);
  const std::string again =
      std::string(H3_BIN_DIR) + "/h3 --log-level error convert " + f + " -o " + f + " 2>/dev/null";
  const int st = std::system(again.c_str());
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2);
  EXPECT_EQ(fs::file_size(f), size) << "the input is untouched";
}
