// The plain C++ reference of fused_kernels.h: the same math as the CUDA kernels, one
// loop per formula, for the CPU tests of the autograd glue (fused_ops.h). Any thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/model/fused_kernels.h"

namespace slidedp::fused::cpu {
namespace {

float ToF(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as __float2bfloat16_rn and ATen's conversion do.
uint16_t ToB(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float Round(float f) { return ToF(ToB(f)); }
float Sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

void RmsNorm(const RmsNormArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t o = r * a.cols;
    std::vector<float> s(a.cols);
    float ss = 0.0f;
    for (int64_t c = 0; c < a.cols; ++c) {
      float v = ToF(a.x[o + c]);
      if (a.residual != nullptr) {
        v = Round(v + ToF(a.residual[o + c]));
        a.sum[o + c] = ToB(v);
      }
      s[c] = v;
      ss += v * v;
    }
    const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(a.cols) + a.eps);
    a.rstd[r] = rstd;
    for (int64_t c = 0; c < a.cols; ++c) a.y[o + c] = ToB(ToF(a.w[c]) * Round(s[c] * rstd));
  }
}

int RmsNormBackwardParts(int64_t rows) { return 1; }

void RmsNormBackward(const RmsNormGradArgs& a) {
  std::vector<float> dw(a.cols, 0.0f);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t o = r * a.cols;
    const float rstd = a.rstd[r];
    float dot = 0.0f;
    for (int64_t c = 0; c < a.cols; ++c) {
      const float n = ToF(a.s[o + c]) * rstd;
      const float dy = ToF(a.dy[o + c]);
      dot += dy * ToF(a.w[c]) * n;
      dw[c] += dy * Round(n);
    }
    const float mean = dot / static_cast<float>(a.cols);
    for (int64_t c = 0; c < a.cols; ++c) {
      const float n = ToF(a.s[o + c]) * rstd;
      float g = rstd * (ToF(a.dy[o + c]) * ToF(a.w[c]) - n * mean);
      if (a.dsum != nullptr) g += ToF(a.dsum[o + c]);
      a.dx[o + c] = ToB(g);
    }
  }
  for (int64_t c = 0; c < a.cols; ++c) a.dw_partial[c] = dw[c];
}

void Rope(const RopeArgs& a) {
  const int64_t half = a.D / 2;
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.H; ++h) {
      for (int64_t t = 0; t < a.T; ++t) {
        const uint16_t* in = a.in + b * a.in_b + h * a.in_h + t * a.in_t;
        uint16_t* out = a.out + b * a.out_b + h * a.out_h + t * a.out_t;
        const int64_t row = (b * a.table_row_b + t) * a.D;
        for (int64_t i = 0; i < half; ++i) {
          const float c1 = Round(a.cos[row + i]), s1 = Round(a.sin[row + i]);
          const float c2 = Round(a.cos[row + i + half]), s2 = Round(a.sin[row + i + half]);
          const float x1 = ToF(in[i]), x2 = ToF(in[i + half]);
          if (!a.backward) {
            out[i] = ToB(x1 * c1 - x2 * s1);
            out[i + half] = ToB(x2 * c2 + x1 * s2);
          } else {
            out[i] = ToB(x1 * c1 + x2 * s2);
            out[i + half] = ToB(x2 * c2 - x1 * s1);
          }
        }
      }
    }
  }
}

void Swiglu(const SwigluArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) {
      const float g = ToF(a.gate[r * a.ld + c]);
      a.out[r * a.cols + c] = ToB(g * Sigmoid(g) * ToF(a.up[r * a.ld + c]));
    }
  }
}

void SwigluBackward(const SwigluGradArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) {
      const int64_t i = r * a.ld + c;
      const float g = ToF(a.gate[i]), u = ToF(a.up[i]), dy = ToF(a.dy[r * a.cols + c]);
      const float sg = Sigmoid(g);
      a.dgate[i] = ToB(dy * u * sg * (1.0f + g * (1.0f - sg)));
      a.dup[i] = ToB(dy * g * sg);
    }
  }
}

void CrossEntropy(const CrossEntropyArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    uint16_t* x = a.logits + r * a.vocab;
    const int64_t target = a.targets[r];
    if (target == a.ignore_index) {
      a.loss[r] = 0.0f;
      std::memset(x, 0, static_cast<size_t>(a.vocab) * sizeof(uint16_t));
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < a.vocab; ++c) m = std::max(m, ToF(x[c]));
    float s = 0.0f;
    for (int64_t c = 0; c < a.vocab; ++c) s += std::exp(ToF(x[c]) - m);
    a.loss[r] = std::log(s) + m - ToF(x[target]);
    for (int64_t c = 0; c < a.vocab; ++c) {
      const float p = std::exp(ToF(x[c]) - m) / s;
      x[c] = ToB((p - (c == target ? 1.0f : 0.0f)) * a.scale);
    }
  }
}

}  // namespace slidedp::fused::cpu
