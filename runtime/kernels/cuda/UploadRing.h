//===- kernels/cuda/UploadRing.h - Spans of a circular staging buffer ------===//
//
// Where the next upload's bytes go in a circular buffer of pinned host
// memory. A copy from pinned memory is queued on the stream and the host goes
// on, so its bytes must stay untouched until the device has read them: the
// spans are handed out first in first out, and before a span is handed out
// every older span it would overwrite is retired (the caller waits for that
// span's copy). No CUDA here, so that the arithmetic is tested without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_UPLOADRING_H
#define MOERT_KERNELS_CUDA_UPLOADRING_H

#include <cstddef>
#include <cstdint>
#include <deque>
#include <stdexcept>

namespace moert::cuda {

class UploadRing {
public:
  /// Spans start at multiples of Align (so that any element type may be
  /// read from them).
  explicit UploadRing(size_t Capacity, size_t Align = 256) : Capacity(Capacity), Align(Align) {
    if (Align == 0 || Capacity % Align != 0)
      throw std::invalid_argument("an upload ring's capacity must be a multiple of its alignment");
  }

  /// Whether a span of Bytes fits the ring at all (larger uploads are the
  /// caller's to copy another way).
  bool takes(size_t Bytes) const { return Bytes > 0 && rounded(Bytes) <= Capacity; }

  /// The offset of a new span of Bytes (takes(Bytes)), known as Id. Before
  /// it returns, Retire(Id) is called for each older span, oldest first,
  /// that the new one could overwrite; those are forgotten.
  template <typename RetireFn> size_t place(size_t Bytes, uint64_t Id, RetireFn &&Retire) {
    if (!takes(Bytes))
      throw std::invalid_argument("an upload ring cannot hold a span of this size");
    const size_t Size = rounded(Bytes);
    size_t Start = Head;
    const bool Wraps = Start + Size > Capacity;
    if (Wraps)
      Start = 0;
    // The live spans follow each other around the ring from the oldest, so
    // the ones the new span reaches are the oldest ones: the spans in the
    // end the new one skips when it wraps, then those it overlaps.
    while (!Live.empty()) {
      const Span &Oldest = Live.front();
      const bool Skipped = Wraps && Oldest.Offset >= Head;
      const bool Overlaps = Oldest.Offset < Start + Size && Start < Oldest.Offset + Oldest.Bytes;
      if (!Skipped && !Overlaps)
        break;
      const uint64_t Retired = Oldest.Id;
      Live.pop_front();
      Retire(Retired);
    }
    Live.push_back({Start, Size, Id});
    Head = Start + Size;
    return Start;
  }

  /// Spans handed out and not yet retired.
  size_t live() const { return Live.size(); }
  size_t capacity() const { return Capacity; }

private:
  struct Span {
    size_t Offset, Bytes;
    uint64_t Id;
  };
  size_t rounded(size_t Bytes) const { return (Bytes + Align - 1) / Align * Align; }

  size_t Capacity, Align, Head = 0;
  std::deque<Span> Live;
};

} // namespace moert::cuda

#endif
