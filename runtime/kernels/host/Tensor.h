//===- kernels/host/Tensor.h - Dense row-major float tensors ---------------===//
//
// The runtime's one array type: contiguous fp32 storage with a shape. Layers
// keep their own conventions on top (activations are [tokens, features],
// weights are [in, out]); the tensor only owns memory and knows its shape.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_HOST_TENSOR_H
#define MOERT_KERNELS_HOST_TENSOR_H

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <vector>

namespace moert {

class Tensor {
public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> Shape) : Shape(std::move(Shape)) { Data.assign(numel(), 0.0f); }
  Tensor(std::initializer_list<int64_t> Shape) : Tensor(std::vector<int64_t>(Shape)) {}

  int64_t numel() const {
    int64_t N = 1;
    for (int64_t D : Shape)
      N *= D;
    return Shape.empty() ? 0 : N;
  }
  int64_t dim(size_t I) const { return Shape[I]; }
  size_t rank() const { return Shape.size(); }
  const std::vector<int64_t> &shape() const { return Shape; }
  /// Rows of a 2-D view: all dimensions but the last.
  int64_t rows() const { return Shape.empty() ? 0 : numel() / Shape.back(); }
  int64_t cols() const { return Shape.empty() ? 0 : Shape.back(); }

  float *data() { return Data.data(); }
  const float *data() const { return Data.data(); }
  float &operator[](int64_t I) { return Data[I]; }
  float operator[](int64_t I) const { return Data[I]; }
  float *row(int64_t R) { return Data.data() + R * cols(); }
  const float *row(int64_t R) const { return Data.data() + R * cols(); }

  void zero() { std::fill(Data.begin(), Data.end(), 0.0f); }
  void resize(std::vector<int64_t> NewShape) {
    Shape = std::move(NewShape);
    Data.assign(numel(), 0.0f);
  }
  /// Shaped NewShape: its storage kept where it has that shape already (an
  /// array held on a compute backend before it is written), else fresh
  /// zeros.
  void ensureShape(const std::vector<int64_t> &NewShape) {
    if (Shape != NewShape)
      *this = Tensor(NewShape);
  }
  /// The same elements under another shape of as many elements.
  void reshape(std::vector<int64_t> NewShape) {
    int64_t N = 1;
    for (int64_t D : NewShape)
      N *= D;
    if (N != numel())
      throw std::invalid_argument("Tensor::reshape: element count differs");
    Shape = std::move(NewShape);
  }
  /// Bytes held, for the runtime's activation accounting.
  int64_t bytes() const { return int64_t(Data.size() * sizeof(float)); }
  std::vector<float> &storage() { return Data; }
  const std::vector<float> &storage() const { return Data; }

private:
  std::vector<int64_t> Shape;
  std::vector<float> Data;
};

} // namespace moert

#endif
