// CUDA rotary embedding (kernels.hpp): one thread per rotated pair, the angle
// and the rotation from kernels/math/rope.hpp. cos/sin are taken in double of
// the f32 angle and rounded to f32, as the host's tables are. positions (null:
// none) gives each token's position, as on the host.
#include "kernels/cuda/launch.cuh"
#include "kernels/math/rope.hpp"

namespace ftrain::cuda {

void launch_rope(FloatSpan in, const float* inv_freq, std::int64_t position_offset, const std::int32_t* positions,
                 FloatSpan out, float direction, std::int64_t batch, std::int64_t time, std::int64_t heads, std::int64_t head_dim,
                 cudaStream_t stream) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t pairs = batch * time * heads * half;
  launch_elementwise("ftrain::rope", pairs, stream, [=] __device__(std::int64_t p) {
    const std::int64_t i = p % half;
    const std::int64_t vector = p / half;  // (b, t, h) flattened
    const std::int64_t token = vector / heads;  // (b, t) flattened
    const std::int64_t t = positions != nullptr ? static_cast<std::int64_t>(positions[token]) : token % time;
    const double angle = static_cast<double>(math::rope_angle(position_offset + t, inv_freq[i]));
    const float c = static_cast<float>(::cos(angle)), s = static_cast<float>(::sin(angle));
    const std::int64_t base = vector * head_dim;
    const math::RotatedPair r = math::rope_rotate(load_f32(in, base + i), load_f32(in, base + i + half), c, s, direction);
    store_f32(out, base + i, r.first);
    store_f32(out, base + i + half, r.second);
  });
}

}  // namespace ftrain::cuda
