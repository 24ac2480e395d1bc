// Rotary-embedding inverse frequencies (see rope_frequencies.hpp).
#include "kernels/rope_frequencies.hpp"

#include <cmath>
#include <numbers>
#include <vector>

#include "base/error.hpp"

namespace ftrain {

namespace {

std::vector<double> default_inv_freq(std::int64_t head_dim, double theta) {
  FT_CHECK(head_dim > 0 && head_dim % 2 == 0) << "rope: head_dim " << head_dim << " must be positive and even";
  FT_CHECK(theta > 0.0) << "rope: rope_theta " << theta << " must be positive";
  std::vector<double> inv_freq(static_cast<std::size_t>(head_dim / 2));
  for (std::int64_t i = 0; i < head_dim / 2; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  return inv_freq;
}

Tensor to_f32_tensor(const std::vector<double>& values, const char* name) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::f32, Device::host, name);
  float* p = t.data_as<float>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  return t;
}

}  // namespace

Tensor rope_inv_freq(std::int64_t head_dim, double theta) {
  return to_f32_tensor(default_inv_freq(head_dim, theta), "rope.inv_freq");
}

Tensor rope_inv_freq_llama3(std::int64_t head_dim, double theta, double factor, double low_freq_factor,
                            double high_freq_factor, std::int64_t original_max_position) {
  FT_CHECK(factor > 0.0) << "rope llama3 scaling: factor " << factor << " must be positive";
  FT_CHECK(low_freq_factor > 0.0 && high_freq_factor > low_freq_factor)
      << "rope llama3 scaling: need 0 < low_freq_factor (" << low_freq_factor << ") < high_freq_factor ("
      << high_freq_factor << ")";
  FT_CHECK(original_max_position > 0) << "rope llama3 scaling: original_max_position_embeddings "
                                      << original_max_position << " must be positive";
  std::vector<double> inv_freq = default_inv_freq(head_dim, theta);
  const double original = static_cast<double>(original_max_position);
  const double low_freq_wavelen = original / low_freq_factor;
  const double high_freq_wavelen = original / high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = (1.0 - smooth) * f / factor + smooth * f;
    }
  }
  return to_f32_tensor(inv_freq, "rope.inv_freq");
}

}  // namespace ftrain
