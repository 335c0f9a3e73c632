//===- checkpoint/SafeTensors.cpp - The safetensors file format -----------===//
#include "checkpoint/SafeTensors.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert;
namespace json = llvm::json;

namespace {

/// The header size a reader accepts: the format's own limit (100 MB).
constexpr uint64_t MaxHeaderBytes = 100'000'000;

bool writeAll(int Fd, const char *Data, size_t N) {
  while (N > 0) {
    ssize_t W = ::write(Fd, Data, N);
    if (W < 0 && errno == EINTR)
      continue;
    if (W <= 0)
      return false;
    Data += W;
    N -= size_t(W);
  }
  return true;
}

bool readAt(int Fd, char *Data, size_t N, uint64_t Offset) {
  while (N > 0) {
    ssize_t R = ::pread(Fd, Data, N, off_t(Offset));
    if (R < 0 && errno == EINTR)
      continue;
    if (R <= 0)
      return false;
    Data += R;
    N -= size_t(R);
    Offset += uint64_t(R);
  }
  return true;
}

size_t elementBytes(SafeTensorDtype D) { return D == SafeTensorDtype::F32 ? 4 : 2; }

/// bfloat16 is the top half of a float's bits.
float bf16ToFloat(uint16_t H) {
  uint32_t Bits = uint32_t(H) << 16;
  float F;
  std::memcpy(&F, &Bits, 4);
  return F;
}

/// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float f16ToFloat(uint16_t H) {
  const float Sign = (H & 0x8000) ? -1.0f : 1.0f;
  const int Exp = (H >> 10) & 0x1f, Mant = H & 0x3ff;
  if (Exp == 0) // zero and subnormals: Mant x 2^-24
    return Sign * std::ldexp(float(Mant), -24);
  if (Exp == 31)
    return Mant ? std::numeric_limits<float>::quiet_NaN() : Sign * std::numeric_limits<float>::infinity();
  return Sign * std::ldexp(float(1024 + Mant), Exp - 25);
}

uint64_t elements(const std::vector<int64_t> &Shape) {
  uint64_t N = 1;
  for (int64_t D : Shape)
    N *= uint64_t(D);
  return N;
}

} // namespace

bool moert::writeSafeTensors(const std::string &Path, const std::vector<SafeTensor> &Tensors,
                             const std::map<std::string, std::string> &Metadata, std::string &Error) {
  json::Object Header;
  uint64_t Offset = 0;
  for (const SafeTensor &T : Tensors) {
    uint64_t Bytes = elements(T.Shape) * sizeof(float);
    json::Array Shape;
    for (int64_t D : T.Shape)
      Shape.push_back(D);
    Header[T.Name] = json::Object{{"dtype", "F32"},
                                  {"shape", std::move(Shape)},
                                  {"data_offsets", json::Array{int64_t(Offset), int64_t(Offset + Bytes)}}};
    Offset += Bytes;
  }
  if (!Metadata.empty()) {
    json::Object Meta;
    for (const auto &[K, V] : Metadata)
      Meta[K] = V;
    Header["__metadata__"] = std::move(Meta);
  }
  std::string Text;
  llvm::raw_string_ostream(Text) << json::Value(std::move(Header));
  Text.append((8 - Text.size() % 8) % 8, ' ');
  uint64_t N = Text.size();
  unsigned char Size[8];
  for (int I = 0; I < 8; ++I)
    Size[I] = (unsigned char)((N >> (8 * I)) & 0xff);

  int Fd = ::open(Path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (Fd < 0) {
    Error = "cannot create '" + Path + "': " + std::strerror(errno);
    return false;
  }
  bool Ok = writeAll(Fd, reinterpret_cast<const char *>(Size), 8) && writeAll(Fd, Text.data(), Text.size());
  for (const SafeTensor &T : Tensors)
    Ok = Ok && writeAll(Fd, reinterpret_cast<const char *>(T.Data), elements(T.Shape) * sizeof(float));
  if (Ok && ::fsync(Fd) != 0)
    Ok = false;
  int SavedErrno = errno;
  if (::close(Fd) != 0)
    Ok = false;
  if (!Ok)
    Error = "cannot write '" + Path + "': " + std::strerror(SavedErrno ? SavedErrno : errno);
  return Ok;
}

bool SafeTensorsFile::open(const std::string &P, std::string &Error) {
  Path = P;
  Entries.clear();
  Metadata.clear();
  auto Fail = [&](const std::string &Why) {
    Error = "'" + Path + "': " + Why;
    return false;
  };
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  if (Fd < 0)
    return Fail(std::strerror(errno));
  struct stat St;
  unsigned char Size[8];
  bool Ok = ::fstat(Fd, &St) == 0 && readAt(Fd, reinterpret_cast<char *>(Size), 8, 0);
  uint64_t N = 0;
  for (int I = 0; I < 8; ++I)
    N |= uint64_t(Size[I]) << (8 * I);
  std::string Text;
  if (Ok && N <= MaxHeaderBytes && 8 + N <= uint64_t(St.st_size)) {
    Text.resize(size_t(N));
    Ok = readAt(Fd, Text.data(), Text.size(), 8);
  } else if (Ok) {
    ::close(Fd);
    return Fail("not a safetensors file (its header size " + std::to_string(N) + " exceeds the file)");
  }
  ::close(Fd);
  if (!Ok)
    return Fail("cannot read its header");
  DataStart = 8 + N;
  uint64_t DataBytes = uint64_t(St.st_size) - DataStart;

  llvm::Expected<json::Value> Parsed = json::parse(Text);
  if (!Parsed)
    return Fail("its header is not JSON: " + llvm::toString(Parsed.takeError()));
  const json::Object *Root = Parsed->getAsObject();
  if (!Root)
    return Fail("its header is not a JSON object");
  std::vector<std::pair<uint64_t, uint64_t>> Ranges;
  for (const auto &[Key, Value] : *Root) {
    std::string Name = Key.str();
    if (Name == "__metadata__") {
      const json::Object *Meta = Value.getAsObject();
      if (!Meta)
        return Fail("__metadata__ is not an object");
      for (const auto &[MK, MV] : *Meta) {
        auto S = MV.getAsString();
        if (!S)
          return Fail("__metadata__ '" + MK.str() + "' is not a string");
        Metadata[MK.str()] = S->str();
      }
      continue;
    }
    const json::Object *T = Value.getAsObject();
    auto Dtype = T ? T->getString("dtype") : llvm::None;
    const json::Array *Shape = T ? T->getArray("shape") : nullptr;
    const json::Array *Offsets = T ? T->getArray("data_offsets") : nullptr;
    if (!Dtype || !Shape || !Offsets || Offsets->size() != 2)
      return Fail("tensor '" + Name + "' lacks dtype, shape or data_offsets");
    SafeTensorEntry E;
    if (*Dtype == "F32")
      E.Dtype = SafeTensorDtype::F32;
    else if (*Dtype == "BF16")
      E.Dtype = SafeTensorDtype::BF16;
    else if (*Dtype == "F16")
      E.Dtype = SafeTensorDtype::F16;
    else
      return Fail("tensor '" + Name + "' is " + Dtype->str() + "; moerun reads F32, BF16 and F16 tensors");
    for (const json::Value &D : *Shape) {
      auto Dim = D.getAsInteger();
      if (!Dim || *Dim < 0)
        return Fail("tensor '" + Name + "' has a shape that is not a list of sizes");
      E.Shape.push_back(*Dim);
    }
    auto B = (*Offsets)[0].getAsInteger(), End = (*Offsets)[1].getAsInteger();
    if (!B || !End || *B < 0 || *End < *B || uint64_t(*End) > DataBytes)
      return Fail("tensor '" + Name + "' lies outside the file's data");
    E.Begin = uint64_t(*B);
    E.End = uint64_t(*End);
    if (E.End - E.Begin != elements(E.Shape) * elementBytes(E.Dtype))
      return Fail("tensor '" + Name + "' has " + std::to_string(E.End - E.Begin) + " bytes for its shape's " +
                  std::to_string(elements(E.Shape)) + " " + Dtype->str() + " elements");
    Ranges.push_back({E.Begin, E.End});
    Entries[Name] = std::move(E);
  }
  // The format: tensors back to back, no overlap, no hole.
  std::sort(Ranges.begin(), Ranges.end());
  uint64_t Expect = 0;
  for (auto [B, E] : Ranges) {
    if (B != Expect)
      return Fail("its tensors overlap or leave a hole in the data");
    Expect = E;
  }
  return true;
}

bool SafeTensorsFile::read(const std::string &Name, std::vector<float> &Out, std::string &Error) const {
  auto It = Entries.find(Name);
  if (It == Entries.end()) {
    Error = "'" + Path + "' has no tensor '" + Name + "'";
    return false;
  }
  const SafeTensorEntry &E = It->second;
  const size_t Bytes = size_t(E.End - E.Begin), N = Bytes / elementBytes(E.Dtype);
  Out.resize(N);
  // Narrow elements are read into the back of Out and widened front to back,
  // which never overwrites an element not yet read.
  char *Raw = reinterpret_cast<char *>(Out.data()) + (N * sizeof(float) - Bytes);
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  bool Ok = Fd >= 0 && readAt(Fd, Raw, Bytes, DataStart + E.Begin);
  if (Fd >= 0)
    ::close(Fd);
  if (!Ok)
    Error = "cannot read tensor '" + Name + "' of '" + Path + "' (truncated?)";
  else if (E.Dtype != SafeTensorDtype::F32)
    for (size_t I = 0; I < N; ++I) {
      uint16_t Half;
      std::memcpy(&Half, Raw + 2 * I, 2);
      Out[I] = E.Dtype == SafeTensorDtype::BF16 ? bf16ToFloat(Half) : f16ToFloat(Half);
    }
  return Ok;
}
