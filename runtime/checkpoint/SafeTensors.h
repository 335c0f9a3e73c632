//===- checkpoint/SafeTensors.h - The safetensors file format ---*- C++ -*-===//
//
// A checkpoint's tensors are safetensors files (huggingface/safetensors,
// docs "format"), so that PyTorch (safetensors.torch.load_file) and Hugging
// Face tools read them without moerun:
//
//   uint64 little endian N | N bytes of UTF-8 JSON header | data
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets relative to the start of the data, tensors back to
// back, no gaps), plus an optional "__metadata__" object of string values.
// The writer pads the header with spaces to a multiple of 8 bytes, so that
// every tensor's data starts 8-byte aligned, as the format recommends.
//
// moerun writes F32 (the CPU backend's master weights and Adam moments) and
// reads F32, BF16 and F16 (the dtypes Hugging Face checkpoints are saved in),
// widened to float as it reads. Anything else (FP8 with its scales, integers), or a header that is not what the
// format says (offsets out of order or past the end, a shape that does not
// match the byte count), is an error naming the file and the tensor.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_CHECKPOINT_SAFETENSORS_H
#define MOERT_CHECKPOINT_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moert {

struct SafeTensor {
  std::string Name;
  std::vector<int64_t> Shape;
  const float *Data = nullptr; ///< product(Shape) elements
};

/// Writes Tensors (names unique) to Path and fsyncs it; false with Error set
/// when the file cannot be written whole.
bool writeSafeTensors(const std::string &Path, const std::vector<SafeTensor> &Tensors,
                      const std::map<std::string, std::string> &Metadata, std::string &Error);

/// One tensor of a file that has been read: where its data lies.
/// The element types the reader takes.
enum class SafeTensorDtype { F32, BF16, F16 };

struct SafeTensorEntry {
  std::vector<int64_t> Shape;
  SafeTensorDtype Dtype = SafeTensorDtype::F32;
  uint64_t Begin = 0, End = 0; ///< byte offsets into the file's data
};

/// A safetensors file whose header has been read and checked; its data is
/// read tensor by tensor.
class SafeTensorsFile {
public:
  /// False with Error set when the file is missing or its header is not a
  /// valid safetensors header of F32 tensors.
  bool open(const std::string &Path, std::string &Error);
  const std::map<std::string, SafeTensorEntry> &tensors() const { return Entries; }
  const std::map<std::string, std::string> &metadata() const { return Metadata; }
  /// The tensor's elements as float; false with Error set when it is absent or the
  /// file is shorter than its header says.
  bool read(const std::string &Name, std::vector<float> &Out, std::string &Error) const;

private:
  std::string Path;
  uint64_t DataStart = 0;
  std::map<std::string, SafeTensorEntry> Entries;
  std::map<std::string, std::string> Metadata;
};

} // namespace moert

#endif
