//===- data/ImagePatches.cpp - Images to the vision tower's patches -------===//
#include "data/ImagePatches.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jpeglib.h>
#include <png.h>

using namespace moert;

namespace {

struct FileCloser {
  void operator()(std::FILE *F) const {
    if (F)
      std::fclose(F);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

/// libpng's errors become the message (it would print them), its warnings
/// are dropped.
void pngError(png_structp Png, png_const_charp Message) {
  *static_cast<std::string *>(png_get_error_ptr(Png)) = Message;
  png_longjmp(Png, 1);
}
void pngWarning(png_structp, png_const_charp) {}

bool readPng(std::FILE *F, const std::string &Path, RgbImage &Out, std::string &Error) {
  std::string Reason;
  png_structp Png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &Reason, pngError, pngWarning);
  png_infop Info = Png ? png_create_info_struct(Png) : nullptr;
  if (!Info) {
    png_destroy_read_struct(&Png, nullptr, nullptr);
    Error = "'" + Path + "': cannot start the PNG decoder";
    return false;
  }
  std::vector<png_bytep> Rows;
  if (setjmp(png_jmpbuf(Png))) {
    png_destroy_read_struct(&Png, &Info, nullptr);
    Error = "'" + Path + "' is not a valid PNG file (libpng: " + Reason + ")";
    return false;
  }
  png_init_io(Png, F);
  png_read_info(Png, Info);
  // PIL's convert("RGB"): a palette looked up, grey replicated, alpha dropped.
  png_set_expand(Png);
  png_set_strip_16(Png);
  png_set_strip_alpha(Png);
  png_set_gray_to_rgb(Png);
  png_set_interlace_handling(Png);
  png_read_update_info(Png, Info);
  Out.Width = png_get_image_width(Png, Info);
  Out.Height = png_get_image_height(Png, Info);
  if (png_get_channels(Png, Info) != 3 || png_get_bit_depth(Png, Info) != 8) {
    png_destroy_read_struct(&Png, &Info, nullptr);
    Error = "'" + Path + "': a PNG layout moerun does not read";
    return false;
  }
  Out.Pixels.assign(size_t(Out.Width * Out.Height * 3), 0);
  Rows.resize(size_t(Out.Height));
  for (int64_t Y = 0; Y < Out.Height; ++Y)
    Rows[size_t(Y)] = Out.Pixels.data() + Y * Out.Width * 3;
  png_read_image(Png, Rows.data());
  png_read_end(Png, nullptr);
  png_destroy_read_struct(&Png, &Info, nullptr);
  return true;
}

struct JpegError {
  jpeg_error_mgr Manager;
  std::jmp_buf Jump;
  char Message[JMSG_LENGTH_MAX];
};

void jpegFail(j_common_ptr Info) {
  auto *E = reinterpret_cast<JpegError *>(Info->err);
  (*Info->err->format_message)(Info, E->Message);
  std::longjmp(E->Jump, 1);
}

bool readJpeg(std::FILE *F, const std::string &Path, RgbImage &Out, std::string &Error) {
  jpeg_decompress_struct Info;
  JpegError E;
  Info.err = jpeg_std_error(&E.Manager);
  E.Manager.error_exit = jpegFail;
  if (setjmp(E.Jump)) {
    jpeg_destroy_decompress(&Info);
    Error = "'" + Path + "' is not a valid JPEG file: " + E.Message;
    return false;
  }
  jpeg_create_decompress(&Info);
  jpeg_stdio_src(&Info, F);
  jpeg_read_header(&Info, TRUE);
  if (Info.jpeg_color_space == JCS_CMYK || Info.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&Info);
    Error = "'" + Path + "' is a CMYK JPEG; moerun reads RGB and greyscale ones";
    return false;
  }
  Info.out_color_space = JCS_RGB;
  jpeg_start_decompress(&Info);
  Out.Width = Info.output_width;
  Out.Height = Info.output_height;
  Out.Pixels.assign(size_t(Out.Width * Out.Height * 3), 0);
  while (Info.output_scanline < Info.output_height) {
    JSAMPROW Row = Out.Pixels.data() + int64_t(Info.output_scanline) * Out.Width * 3;
    jpeg_read_scanlines(&Info, &Row, 1);
  }
  jpeg_finish_decompress(&Info);
  jpeg_destroy_decompress(&Info);
  return true;
}

/// Pillow's bicubic kernel (a = -0.5), support 2.
double bicubic(double X) {
  const double A = -0.5;
  X = std::fabs(X);
  if (X < 1.0)
    return ((A + 2.0) * X - (A + 3.0)) * X * X + 1;
  if (X < 2.0)
    return (((X - 5) * X + 8) * X - 4) * A;
  return 0.0;
}

constexpr int PrecisionBits = 32 - 8 - 2;

/// One axis's taps: output pixel I reads Count inputs from First with the
/// fixed-point weights Weights[I * Taps ...] (Pillow's precompute_coeffs and
/// normalize_coeffs_8bpc).
struct Taps {
  int64_t Taps = 0;
  std::vector<int64_t> First, Count;
  std::vector<int32_t> Weights;
};

Taps precompute(int64_t InSize, int64_t OutSize) {
  const double Scale = double(InSize) / double(OutSize), FilterScale = std::max(Scale, 1.0);
  const double Support = 2.0 * FilterScale;
  Taps T;
  T.Taps = int64_t(std::ceil(Support)) * 2 + 1;
  T.First.resize(size_t(OutSize));
  T.Count.resize(size_t(OutSize));
  T.Weights.assign(size_t(OutSize * T.Taps), 0);
  std::vector<double> K(size_t(T.Taps));
  for (int64_t O = 0; O < OutSize; ++O) {
    const double Center = (double(O) + 0.5) * Scale;
    const int64_t Min = std::max<int64_t>(int64_t(Center - Support + 0.5), 0);
    const int64_t Max = std::min<int64_t>(int64_t(Center + Support + 0.5), InSize) - Min;
    double Sum = 0;
    for (int64_t X = 0; X < Max; ++X) {
      K[size_t(X)] = bicubic((double(X + Min) - Center + 0.5) / FilterScale);
      Sum += K[size_t(X)];
    }
    for (int64_t X = 0; X < Max; ++X) {
      const double W = Sum != 0.0 ? K[size_t(X)] / Sum : K[size_t(X)];
      T.Weights[size_t(O * T.Taps + X)] =
          int32_t(W < 0 ? -0.5 + W * (1 << PrecisionBits) : 0.5 + W * (1 << PrecisionBits));
    }
    T.First[size_t(O)] = Min;
    T.Count[size_t(O)] = Max;
  }
  return T;
}

uint8_t clip8(int32_t Sum) { return uint8_t(std::clamp(Sum >> PrecisionBits, 0, 255)); }

/// One pass along an axis: Stride steps along it, Lines x Channels values
/// per position across it.
RgbImage resamplePass(const RgbImage &In, int64_t Width, int64_t Height, bool Horizontal) {
  const Taps T = precompute(Horizontal ? In.Width : In.Height, Horizontal ? Width : Height);
  RgbImage Out;
  Out.Width = Width;
  Out.Height = Height;
  Out.Pixels.assign(size_t(Width * Height * 3), 0);
  for (int64_t Y = 0; Y < Height; ++Y)
    for (int64_t X = 0; X < Width; ++X) {
      const int64_t O = Horizontal ? X : Y;
      for (int C = 0; C < 3; ++C) {
        int32_t Sum = 1 << (PrecisionBits - 1);
        for (int64_t K = 0; K < T.Count[size_t(O)]; ++K) {
          const int64_t Src = T.First[size_t(O)] + K;
          const uint8_t V = Horizontal ? In.Pixels[size_t((Y * In.Width + Src) * 3 + C)]
                                       : In.Pixels[size_t((Src * In.Width + X) * 3 + C)];
          Sum += int32_t(V) * T.Weights[size_t(O * T.Taps + K)];
        }
        Out.Pixels[size_t((Y * Width + X) * 3 + C)] = clip8(Sum);
      }
    }
  return Out;
}

} // namespace

bool moert::readImageFile(const std::string &Path, RgbImage &Out, std::string &Error) {
  File F(std::fopen(Path.c_str(), "rb"));
  if (!F) {
    Error = "cannot open '" + Path + "': " + std::strerror(errno);
    return false;
  }
  unsigned char Magic[8] = {0};
  const size_t Got = std::fread(Magic, 1, sizeof(Magic), F.get());
  std::rewind(F.get());
  if (Got >= 8 && !png_sig_cmp(Magic, 0, 8))
    return readPng(F.get(), Path, Out, Error);
  if (Got >= 3 && Magic[0] == 0xFF && Magic[1] == 0xD8 && Magic[2] == 0xFF)
    return readJpeg(F.get(), Path, Out, Error);
  Error = "'" + Path + "' is neither a PNG nor a JPEG file";
  return false;
}

RgbImage moert::resizeBicubic(const RgbImage &In, int64_t Width, int64_t Height) {
  // Pillow resamples the horizontal axis first, each pass rounded to 8 bits,
  // and skips an axis whose size does not change.
  RgbImage Out = In;
  if (Width != In.Width)
    Out = resamplePass(Out, Width, In.Height, true);
  if (Height != In.Height)
    Out = resamplePass(Out, Width, Height, false);
  return Out;
}

bool moert::smartResize(int64_t Height, int64_t Width, const ImagePreprocess &P, int64_t &OutHeight, int64_t &OutWidth,
                        std::string &Error) {
  if (Height <= 0 || Width <= 0) {
    Error = "the image is empty";
    return false;
  }
  if (double(std::max(Height, Width)) / double(std::min(Height, Width)) > 200) {
    Error = "its aspect ratio " + std::to_string(std::max(Height, Width) / std::min(Height, Width)) +
            " exceeds 200, the most the Qwen-VL processors take";
    return false;
  }
  const double Factor = double(P.PatchSize * P.MergeSize);
  // Python's round: halves to even, as std::nearbyint in the default mode.
  double H = std::nearbyint(double(Height) / Factor) * Factor, W = std::nearbyint(double(Width) / Factor) * Factor;
  if (H * W > double(P.MaxPixels)) {
    const double Beta = std::sqrt(double(Height) * double(Width) / double(P.MaxPixels));
    H = std::max(Factor, std::floor(double(Height) / Beta / Factor) * Factor);
    W = std::max(Factor, std::floor(double(Width) / Beta / Factor) * Factor);
  } else if (H * W < double(P.MinPixels)) {
    const double Beta = std::sqrt(double(P.MinPixels) / (double(Height) * double(Width)));
    H = std::ceil(double(Height) * Beta / Factor) * Factor;
    W = std::ceil(double(Width) * Beta / Factor) * Factor;
  }
  OutHeight = int64_t(H);
  OutWidth = int64_t(W);
  return true;
}

bool moert::imagePatches(const RgbImage &Image, const ImagePreprocess &P, ImagePatches &Out, std::string &Error) {
  int64_t Height = 0, Width = 0;
  if (!smartResize(Image.Height, Image.Width, P, Height, Width, Error))
    return false;
  const RgbImage Sized = resizeBicubic(Image, Width, Height);
  const int64_t Ps = P.PatchSize, M = P.MergeSize, Tp = P.TemporalPatch;
  Out.Rows = Height / Ps;
  Out.Cols = Width / Ps;
  Out.Values.assign(size_t(Out.Rows * Out.Cols * P.patchDim()), 0.0f);
  // transformers' rescale (x in float64 times 1/255, to float32) and
  // normalize ((x - mean) / std in float32).
  auto Value = [&](int64_t Y, int64_t X, int C) {
    const float Scaled = float(double(Sized.Pixels[size_t((Y * Width + X) * 3 + C)]) * (1.0 / 255.0));
    return (Scaled - P.Mean[C]) / P.Std[C];
  };
  float *Dst = Out.Values.data();
  for (int64_t Br = 0; Br < Out.Rows / M; ++Br)
    for (int64_t Bc = 0; Bc < Out.Cols / M; ++Bc)
      for (int64_t Ir = 0; Ir < M; ++Ir)
        for (int64_t Ic = 0; Ic < M; ++Ic) {
          const int64_t Y0 = (Br * M + Ir) * Ps, X0 = (Bc * M + Ic) * Ps;
          for (int C = 0; C < 3; ++C)
            for (int64_t T = 0; T < Tp; ++T) // the image repeated as every frame
              for (int64_t Y = 0; Y < Ps; ++Y)
                for (int64_t X = 0; X < Ps; ++X)
                  *Dst++ = Value(Y0 + Y, X0 + X, C);
        }
  return true;
}
