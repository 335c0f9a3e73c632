//===- CheckpointTest.cpp - safetensors files and checkpoint directories --===//
#include "checkpoint/CheckpointDir.h"
#include "checkpoint/SafeTensors.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <tuple>

using namespace moert;
namespace fs = llvm::sys::fs;

namespace {

/// A fresh directory, removed with everything in it.
struct Scratch {
  Scratch() {
    llvm::SmallString<128> P;
    EXPECT_FALSE(fs::createUniqueDirectory("moert-checkpoint", P));
    Path = std::string(P);
  }
  ~Scratch() { fs::remove_directories(Path); }
  std::string operator/(const std::string &Name) const { return Path + "/" + Name; }
  std::string Path;
};

std::string readAll(const std::string &Path) {
  std::ifstream In(Path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(In), {});
}

void writeAll(const std::string &Path, const std::string &Bytes) {
  std::ofstream(Path, std::ios::binary | std::ios::trunc) << Bytes;
}

/// A file of one header and Data bytes, as a reader must refuse or accept.
std::string rawFile(const std::string &Header, size_t DataBytes) {
  std::string S(8, '\0');
  uint64_t N = Header.size();
  std::memcpy(&S[0], &N, 8);
  return S + Header + std::string(DataBytes, '\0');
}

TEST(SafeTensors, RoundTripAndLayout) {
  Scratch D;
  std::vector<float> A = {1, 2, 3, 4, 5, 6}, B = {-0.5f};
  ASSERT_TRUE([&] {
    std::string Error;
    return writeSafeTensors(D / "t.safetensors", {{"a", {2, 3}, A.data()}, {"b.c", {1}, B.data()}},
                            {{"format", "moerun"}}, Error);
  }());
  std::string Bytes = readAll(D / "t.safetensors");
  uint64_t N;
  std::memcpy(&N, Bytes.data(), 8);
  // The header is padded to 8 bytes, then the tensors back to back in order.
  EXPECT_EQ(N % 8, 0u);
  EXPECT_EQ(Bytes.size(), 8 + N + 7 * sizeof(float));
  float First;
  std::memcpy(&First, Bytes.data() + 8 + N, 4);
  EXPECT_EQ(First, 1.0f);
  EXPECT_NE(Bytes.find("\"data_offsets\":[0,24]"), std::string::npos);

  SafeTensorsFile F;
  std::string Error;
  ASSERT_TRUE(F.open(D / "t.safetensors", Error)) << Error;
  EXPECT_EQ(F.metadata().at("format"), "moerun");
  ASSERT_EQ(F.tensors().size(), 2u);
  EXPECT_EQ(F.tensors().at("a").Shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> Out;
  ASSERT_TRUE(F.read("b.c", Out, Error)) << Error;
  EXPECT_EQ(Out, B);
  ASSERT_TRUE(F.read("a", Out, Error));
  EXPECT_EQ(Out, A);
  EXPECT_FALSE(F.read("z", Out, Error));
  EXPECT_NE(Error.find("no tensor 'z'"), std::string::npos);
}

/// A file of tensors given as raw bytes, back to back in header order.
std::string rawTensors(const std::vector<std::tuple<std::string, std::string, std::string>> &Tensors) {
  std::string Header = "{", Data;
  for (const auto &[Name, Dtype, Bytes] : Tensors) {
    Header += (Header.size() > 1 ? "," : "") + ("\"" + Name + "\":{\"dtype\":\"" + Dtype + "\",\"shape\":[") +
              std::to_string(Bytes.size() / (Dtype == "F32" ? 4 : 2)) + "],\"data_offsets\":[" +
              std::to_string(Data.size()) + "," + std::to_string(Data.size() + Bytes.size()) + "]}";
    Data += Bytes;
  }
  std::string File = rawFile(Header + "}", 0);
  return File + Data;
}

TEST(SafeTensors, HalfPrecisionTensorsAreWidenedToFloat) {
  Scratch D;
  // Little-endian 16-bit words: bf16 1.0 (0x3f80), -2.5 (0xc020), 2^-133 (0x0001,
  // a subnormal); f16 1.0 (0x3c00), -0.5 (0xb800), 65504 (0x7bff, the largest),
  // 2^-24 (0x0001, the smallest subnormal), +inf (0x7c00).
  const std::string Bf16("\x80\x3f\x20\xc0\x01\x00", 6), F16("\x00\x3c\x00\xb8\xff\x7b\x01\x00\x00\x7c", 10);
  writeAll(D / "h.safetensors", rawTensors({{"b", "BF16", Bf16}, {"h", "F16", F16}}));
  SafeTensorsFile F;
  std::string Error;
  ASSERT_TRUE(F.open(D / "h.safetensors", Error)) << Error;
  EXPECT_EQ(F.tensors().at("b").Dtype, SafeTensorDtype::BF16);
  EXPECT_EQ(F.tensors().at("h").Shape, (std::vector<int64_t>{5}));
  std::vector<float> Out;
  ASSERT_TRUE(F.read("b", Out, Error)) << Error;
  EXPECT_EQ(Out, (std::vector<float>{1.0f, -2.5f, std::ldexp(1.0f, -133)}));
  ASSERT_TRUE(F.read("h", Out, Error)) << Error;
  EXPECT_EQ(Out,
            (std::vector<float>{1.0f, -0.5f, 65504.0f, std::ldexp(1.0f, -24), std::numeric_limits<float>::infinity()}));
}

struct BadHeader {
  std::string Header;
  size_t DataBytes;
  const char *Message;
};

TEST(SafeTensors, MalformedFilesAreRefusedWithTheReason) {
  Scratch D;
  const BadHeader Cases[] = {
      {"not json", 0, "not JSON"},
      {"[1]", 0, "not a JSON object"},
      {R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1, "is F8_E4M3; moerun reads F32, BF16"},
      {R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,2]}})", 2, "2 bytes for its shape's 2 BF16"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "4 bytes for its shape's 2"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2, "outside the file's data"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4, "lacks dtype, shape or data_offsets"},
      {R"({"__metadata__":{"k":1}})", 0, "is not a string"},
  };
  for (const BadHeader &C : Cases) {
    writeAll(D / "bad", rawFile(C.Header, C.DataBytes));
    SafeTensorsFile F;
    std::string Error;
    EXPECT_FALSE(F.open(D / "bad", Error)) << C.Header;
    EXPECT_NE(Error.find(C.Message), std::string::npos) << C.Header << " -> " << Error;
  }
  // A header size beyond the file.
  writeAll(D / "short", std::string("\xff\0\0\0\0\0\0\0{}", 10));
  SafeTensorsFile F;
  std::string Error;
  EXPECT_FALSE(F.open(D / "short", Error));
  EXPECT_NE(Error.find("exceeds the file"), std::string::npos) << Error;
  EXPECT_FALSE(F.open(D / "absent", Error));
}

CheckpointManifest manifest(int64_t Step) {
  CheckpointManifest M;
  M.Step = Step;
  M.ConsumedSamples = Step * 8;
  M.Seed = 18446744073709551615ull; // the largest: kept as a string in JSON
  M.Recipe = "r";
  M.RecipeHash = "xxh64:0";
  M.Layout = {{"tp", 2}, {"pp", 1}};
  M.DistributedOptimizer = true;
  M.OptimizerSteps = Step;
  return M;
}

/// One save of Step as the ranks make it: begin, a tensor file, commit.
void save(const std::string &Dir, int64_t Step, int Keep) {
  std::string Staging, Error;
  ASSERT_TRUE(beginCheckpoint(Dir, Step, Staging, Error)) << Error;
  EXPECT_EQ(Staging, checkpointStagingPath(Dir, Step));
  std::vector<float> X(3, float(Step));
  ASSERT_TRUE(writeSafeTensors(Staging + "/" + tensorFileName(0), {{"w", {3}, X.data()}}, {}, Error)) << Error;
  ASSERT_TRUE(commitCheckpoint(Dir, Staging, manifest(Step), Keep, Error)) << Error;
}

TEST(CheckpointDir, LatestIsTheLastCommittedAndKeepPrunes) {
  Scratch D;
  std::string Dir = D / "ck", Path, Error;
  bool Found = true;
  CheckpointManifest M;
  ASSERT_TRUE(findLatestCheckpoint(Dir, Found, Path, M, Error));
  EXPECT_FALSE(Found);

  save(Dir, 2, 2);
  save(Dir, 4, 2);
  // A save of step 6 that never committed: the latest is still step 4.
  std::string Staging;
  ASSERT_TRUE(beginCheckpoint(Dir, 6, Staging, Error));
  ASSERT_TRUE(findLatestCheckpoint(Dir, Found, Path, M, Error)) << Error;
  ASSERT_TRUE(Found);
  EXPECT_EQ(M.Step, 4);
  EXPECT_EQ(Path, Dir + "/iter_0000004");
  EXPECT_EQ(M.Seed, 18446744073709551615ull);
  EXPECT_EQ(M.Layout.at("tp"), 2);
  ASSERT_EQ(M.Tensors.size(), 1u);
  EXPECT_EQ(M.Tensors.at("w").File, "tensors-00000.safetensors");
  EXPECT_EQ(M.Tensors.at("w").Shape, (std::vector<int64_t>{3}));

  // The stale .partial of step 6 is replaced by the next save of step 6;
  // --keep 2 then removes step 2.
  save(Dir, 6, 2);
  EXPECT_FALSE(fs::exists(Dir + "/iter_0000006.partial"));
  EXPECT_FALSE(fs::exists(Dir + "/iter_0000002"));
  EXPECT_TRUE(fs::exists(Dir + "/iter_0000004"));
  ASSERT_TRUE(findLatestCheckpoint(Dir, Found, Path, M, Error));
  EXPECT_EQ(M.Step, 6);
}

TEST(CheckpointDir, DamagedLatestOrManifestIsAnError) {
  Scratch D;
  std::string Dir = D / "ck", Path, Error;
  bool Found;
  CheckpointManifest M;
  save(Dir, 3, 0);
  writeAll(Dir + "/latest_checkpointed_iteration.txt", "three\n");
  EXPECT_FALSE(findLatestCheckpoint(Dir, Found, Path, M, Error));
  EXPECT_NE(Error.find("does not hold a step number"), std::string::npos) << Error;

  writeAll(Dir + "/latest_checkpointed_iteration.txt", "5\n");
  EXPECT_FALSE(findLatestCheckpoint(Dir, Found, Path, M, Error));
  EXPECT_NE(Error.find("names step 5"), std::string::npos) << Error;

  writeAll(Dir + "/latest_checkpointed_iteration.txt", "3\n");
  writeAll(Dir + "/iter_0000003/manifest.json", R"({"format":"moerun-checkpoint","version":2})");
  EXPECT_FALSE(findLatestCheckpoint(Dir, Found, Path, M, Error));
  EXPECT_NE(Error.find("manifest version 2"), std::string::npos) << Error;
}

TEST(CheckpointDir, ManifestRoundTrip) {
  CheckpointManifest M = manifest(7);
  M.Tensors["optimizer.exp_avg.w"] = {{4, 2}, "tensors-00001.safetensors"};
  CheckpointManifest Back;
  std::string Error;
  ASSERT_TRUE(CheckpointManifest::parse(M.toJSON(), Back, Error)) << Error;
  EXPECT_EQ(Back.toJSON(), M.toJSON());
  EXPECT_FALSE(CheckpointManifest::parse(R"({"format":"other"})", Back, Error));
  // A file name that leaves the checkpoint directory is refused.
  M.Tensors["w"] = {{1}, "../x.safetensors"};
  EXPECT_FALSE(CheckpointManifest::parse(M.toJSON(), Back, Error));
}

} // namespace
