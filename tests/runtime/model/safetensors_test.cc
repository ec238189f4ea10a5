// Tests of the safetensors reader and writer: round trips (F32, BF16 with its rounding,
// F16 reading), atomic writes, and malformed files that must give a clear error.
#include "runtime/model/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace slidedp {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / (std::string("st_") + info->name());
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string Le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file image: header length, header text, data section.
std::string Image(const std::string& header, const std::string& data) { return Le64(header.size()) + header + data; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint16_t BitsOf16(absl::Span<const uint8_t> bytes, size_t i) {
  uint16_t v;
  std::memcpy(&v, bytes.data() + 2 * i, 2);
  return v;
}

TEST(SafetensorsTest, F32RoundTripWithMetadataScalarAndEmptyTensor) {
  const std::string path = TempPath("a.safetensors");
  std::vector<float> w = {1.5f, -2.25f, 3.0f, 0.0f, 1e-30f, -7.0f};
  float scalar = 42.0f;
  std::vector<TensorToWrite> tensors = {
      {"z.weight", SafetensorsDtype::kF32, {2, 3}, w.data()},
      {"a.scalar", SafetensorsDtype::kF32, {}, &scalar},
      {"m.empty", SafetensorsDtype::kF32, {0, 4}, nullptr},
  };
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string bytes = ReadAll(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  EXPECT_EQ(bytes.size(), 8 + n + 4 * 7);

  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "a.scalar");  // sorted by name
  EXPECT_EQ(f->tensors()[0].begin, 0u);         // offsets contiguous in name order
  EXPECT_EQ(f->tensors()[1].name, "m.empty");
  EXPECT_EQ(f->tensors()[1].begin, 4u);
  EXPECT_EQ(f->tensors()[2].begin, 4u);
  EXPECT_EQ(f->tensors()[2].end, 28u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->Find("z.weight")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f->Find("nope"), nullptr);

  std::vector<float> back(6);
  ASSERT_TRUE(f->ReadAsFloat("z.weight", back.data(), 6).ok());
  EXPECT_EQ(back, w);
  float s = 0;
  ASSERT_TRUE(f->ReadAsFloat("a.scalar", &s, 1).ok());
  EXPECT_EQ(s, 42.0f);
  EXPECT_TRUE(f->ReadAsFloat("m.empty", nullptr, 0).ok());
  EXPECT_EQ(f->ReadAsFloat("z.weight", back.data(), 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->ReadAsFloat("missing", back.data(), 6).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f->RawBytes("z.weight")->size(), 24u);
}

TEST(SafetensorsTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  auto from_bits = [](uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; };
  EXPECT_EQ(FloatToBf16(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(from_bits(0x3f808001u)), 0x3f81);  // above half rounds up
  EXPECT_EQ(FloatToBf16(from_bits(0x3f807fffu)), 0x3f80);  // below half rounds down
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(0x3f82), 1.015625f);

  const std::string path = TempPath("b.safetensors");
  std::vector<float> v = {1.0f, from_bits(0x3f818000u), from_bits(0x3f808001u), -2.0f, 3.14159265f};
  ASSERT_TRUE(WriteSafetensors(path, {{"t", SafetensorsDtype::kBF16, {5}, v.data()}}).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Find("t")->dtype, SafetensorsDtype::kBF16);
  absl::Span<const uint8_t> raw = *f->RawBytes("t");
  ASSERT_EQ(raw.size(), 10u);
  EXPECT_EQ(BitsOf16(raw, 0), 0x3f80);
  EXPECT_EQ(BitsOf16(raw, 1), 0x3f82);
  EXPECT_EQ(BitsOf16(raw, 2), 0x3f81);
  EXPECT_EQ(BitsOf16(raw, 3), 0xc000);
  EXPECT_EQ(BitsOf16(raw, 4), 0x4049);  // pi -> 3.140625
  std::vector<float> back(5);
  ASSERT_TRUE(f->ReadAsFloat("t", back.data(), 5).ok());
  EXPECT_EQ(back[1], 1.015625f);
  EXPECT_EQ(back[4], 3.140625f);
}

TEST(SafetensorsTest, ReadsF16IncludingSubnormalsAndInf) {
  const uint16_t h[] = {0x3c00, 0xc000, 0x0001, 0x7c00, 0x7bff, 0x8000, 0x3555};
  std::string data(reinterpret_cast<const char*>(h), sizeof h);
  std::string img = Image(R"({"h":{"dtype":"F16","shape":[7],"data_offsets":[0,14]}})", data);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::FromBuffer("mem", img);
  ASSERT_TRUE(f.ok()) << f.status();
  float out[7];
  ASSERT_TRUE(f->ReadAsFloat("h", out, 7).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(out[3]) && out[3] > 0);
  EXPECT_EQ(out[4], 65504.0f);
  EXPECT_TRUE(out[5] == 0.0f && std::signbit(out[5]));
  EXPECT_NEAR(out[6], 0.33325f, 1e-5);
}

TEST(SafetensorsTest, OtherDtypesOpenButAreNotReadAsFloat) {
  std::string img = Image(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0'));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::FromBuffer("ints", img);
  ASSERT_TRUE(f.ok()) << f.status();
  float x;
  absl::Status s = f->ReadAsFloat("i", &x, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("I64"), absl::string_view::npos) << s;
}

TEST(SafetensorsTest, OverwriteIsAtomicAndWriterRejectsBadInput) {
  const std::string path = TempPath("c.safetensors");
  float a = 1, b = 2;
  ASSERT_TRUE(WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {1}, &a}}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"y", SafetensorsDtype::kF32, {1}, &b}}).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Find("x"), nullptr);
  EXPECT_NE(f->Find("y"), nullptr);

  EXPECT_FALSE(WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {1}, &a}, {"x", SafetensorsDtype::kF32, {1}, &b}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"x", SafetensorsDtype::kF16, {1}, &a}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {1}, nullptr}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"__metadata__", SafetensorsDtype::kF32, {1}, &a}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"x", SafetensorsDtype::kF32, {-1}, &a}}).ok());
  EXPECT_FALSE(WriteSafetensors(TempPath("no/such/dir/d.safetensors"), {{"x", SafetensorsDtype::kF32, {1}, &a}}).ok());
  EXPECT_NE(SafetensorsFile::Open(path)->Find("y"), nullptr) << "failed writes leave the old file";
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsTest, OpenErrors) {
  EXPECT_EQ(SafetensorsFile::Open(TempPath("missing.safetensors")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(SafetensorsFile::Open(::testing::TempDir()).ok());  // a folder
  const std::string empty = TempPath("empty.safetensors");
  std::ofstream(empty).close();
  absl::Status s = SafetensorsFile::Open(empty).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty.safetensors"), absl::string_view::npos) << s;
}

struct Malformed {
  const char* what;
  std::string bytes;
  const char* expect;  // substring of the message (besides the file name)
};

std::string Entry(const std::string& body) { return "{\"t\":" + body + "}"; }

std::vector<Malformed> MalformedCases() {
  const std::string d16(16, '\0');
  return {
      {"short", std::string(5, '\0'), "shorter than"},
      {"length past end", Le64(100) + "{}", "larger than"},
      {"length 2^63", Le64(uint64_t{1} << 63) + "{}", "exceeds"},
      {"length 2^64-1", Le64(~uint64_t{0}) + "{}", "exceeds"},
      {"not json", Image("{\"t\": [1, 2", d16), "not valid JSON"},
      {"empty header", Image("", d16), "not valid JSON"},
      {"not object", Image("[1,2,3]", d16), "not an object"},
      {"entry not object", Image(Entry("5"), d16), "'t'"},
      {"out of range", Image(Entry(R"({"dtype":"F32","shape":[8],"data_offsets":[0,32]})"), d16), "out of range"},
      {"begin > end", Image(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), d16), "begin > end"},
      {"size mismatch", Image(Entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), d16), "needs 12 bytes"},
      {"unknown dtype", Image(Entry(R"({"dtype":"F99","shape":[1],"data_offsets":[0,4]})"), d16), "unknown dtype"},
      {"dtype not string", Image(Entry(R"({"dtype":3,"shape":[1],"data_offsets":[0,4]})"), d16), "dtype"},
      {"negative dim", Image(Entry(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), d16), "non-negative"},
      {"fractional dim", Image(Entry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), d16), "non-negative"},
      {"string dim", Image(Entry(R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), d16), "non-negative"},
      {"shape not array", Image(Entry(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})"), d16), "shape"},
      {"shape overflow",
       Image(Entry(R"({"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]})"), d16), "overflow"},
      {"bytes overflow", Image(Entry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,16]})"), d16),
       "overflow"},
      {"huge dim", Image(Entry(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})"), d16),
       "non-negative"},
      {"offsets arity", Image(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), d16), "data_offsets"},
      {"negative offset", Image(Entry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), d16), "data_offsets"},
      {"missing offsets", Image(Entry(R"({"dtype":"F32","shape":[1]})"), d16), "data_offsets"},
      {"overlap",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             d16),
       "overlap"},
      {"metadata not object", Image(R"({"__metadata__":[1]})", d16), "__metadata__"},
      {"metadata value", Image(R"({"__metadata__":{"k":1}})", d16), "__metadata__"},
      {"deep nesting", Image(std::string(10000, '[') + std::string(10000, ']'), d16), "nested"},
  };
}

TEST(SafetensorsTest, MalformedFilesGiveClearErrors) {
  for (const Malformed& m : MalformedCases()) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::FromBuffer("bad.safetensors", m.bytes);
    ASSERT_FALSE(f.ok()) << m.what;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << m.what;
    const absl::string_view msg = f.status().message();
    EXPECT_NE(msg.find("bad.safetensors"), absl::string_view::npos) << m.what << ": " << msg;
    EXPECT_NE(msg.find(m.expect), absl::string_view::npos) << m.what << ": " << msg;
  }
}

TEST(SafetensorsTest, TensorErrorsNameTheTensor) {
  std::string img = Image(R"({"layer.3.w":{"dtype":"F32","shape":[5],"data_offsets":[0,20]}})", std::string(8, '\0'));
  absl::Status s = SafetensorsFile::FromBuffer("f", img).status();
  EXPECT_NE(s.message().find("layer.3.w"), absl::string_view::npos) << s;
}

TEST(SafetensorsTest, AcceptsPaddingGapsAndZeroSizedTensorsAnywhere) {
  std::string img = Image(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[10,10]}})"
      "        ",
      std::string(16, '\0'));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::FromBuffer("gaps", img);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors().size(), 2u);
}

TEST(SafetensorsTest, ReadsTheReferenceFixtureWrittenByPython) {
  const std::string path = std::string(SLIDEDP_SOURCE_DIR) + "/tests/reference/fixtures/qwen3/reference.safetensors";
  if (!fs::exists(path)) GTEST_SKIP() << "no fixture at " << path;
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsTensorInfo* loss = f->Find("loss");
  ASSERT_NE(loss, nullptr);
  float l = 0;
  ASSERT_TRUE(f->ReadAsFloat("loss", &l, 1).ok());
  EXPECT_GT(l, 0.0f);
  EXPECT_LT(l, 20.0f);
}

}  // namespace
}  // namespace slidedp
