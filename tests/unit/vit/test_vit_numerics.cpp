// ViT plugin numerics: the tiny model's loss and every parameter gradient
// against a float64 reference of timm's VisionTransformer written here from
// scratch (the patch embedding as the strided convolution it is, naive
// attention with a full softmax, double everywhere).
//
// The test plays the engine (as tests/unit/llama does): counter-RNG init of
// every parameter from its ParamSpec, units forward in order, backward in
// reverse with dy = 1 / (number of labelled images) on the head.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "plugin/loader.hpp"
#include "support/op_test_util.hpp"
#include "support/unit_driver.hpp"

using namespace ftrain;
using ftrain::testing::relative_error;

namespace {

constexpr std::uint64_t kSeed = 4321;
constexpr int kImages = 3;

ModelHandle make_vit(const ModelOverrides& overrides) {
  return PluginLoader({FTRAIN_TEST_VIT_PLUGIN_DIR}).create_model("vit", "tiny", overrides);
}

// ---- the float64 reference --------------------------------------------------------------

using RefParams = std::map<std::string, std::vector<double>>;
using Rows = std::vector<std::vector<double>>;

struct RefConfig {
  int S, P, Cin, K, C, L, H, M;
  double eps;
  explicit RefConfig(const std::map<std::string, std::string>& c)
      : S(std::stoi(c.at("image_size"))),
        P(std::stoi(c.at("patch_size"))),
        Cin(std::stoi(c.at("num_channels"))),
        K(std::stoi(c.at("num_classes"))),
        C(std::stoi(c.at("embed_dim"))),
        L(std::stoi(c.at("depth"))),
        H(std::stoi(c.at("num_heads"))),
        M(std::stoi(c.at("mlp_dim"))),
        eps(std::stod(c.at("layer_norm_eps"))) {}
  int grid() const { return S / P; }
  int tokens() const { return grid() * grid() + 1; }
};

Rows ref_layernorm(const Rows& x, const std::vector<double>& w, const std::vector<double>& b, double eps) {
  Rows y(x.size());
  for (std::size_t n = 0; n < x.size(); ++n) {
    const double width = static_cast<double>(x[n].size());
    double mean = 0, var = 0;
    for (double v : x[n]) mean += v;
    mean /= width;
    for (double v : x[n]) var += (v - mean) * (v - mean);
    const double r = 1.0 / std::sqrt(var / width + eps);  // biased variance, as torch
    y[n].resize(x[n].size());
    for (std::size_t i = 0; i < x[n].size(); ++i) y[n][i] = (x[n][i] - mean) * r * w[i] + b[i];
  }
  return y;
}

Rows ref_linear(const Rows& x, const std::vector<double>& w, const std::vector<double>& b) {
  const std::size_t out = b.size(), in = x[0].size();
  Rows y(x.size(), std::vector<double>(out));
  for (std::size_t n = 0; n < x.size(); ++n)
    for (std::size_t o = 0; o < out; ++o) {
      double s = b[o];
      for (std::size_t i = 0; i < in; ++i) s += w[o * in + i] * x[n][i];
      y[n][o] = s;
    }
  return y;
}

// images [B][H][W][Cin] flattened; labels with -100 = ignored.
double ref_loss(const RefConfig& c, const RefParams& P, const std::vector<double>& images,
                const std::vector<int>& labels) {
  const int B = static_cast<int>(labels.size()), T = c.tokens(), G = c.grid(), D = c.C / c.H;
  const auto& w = P.at("patch_embed.proj.weight");  // [C, Cin, P, P]
  const auto& bias = P.at("patch_embed.proj.bias");
  const auto& cls = P.at("cls_token");
  const auto& pos = P.at("pos_embed");
  // Conv2d(kernel P, stride P) over NHWC pixels.
  Rows h(static_cast<std::size_t>(B * T), std::vector<double>(c.C));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < c.C; ++o) {
        double v;
        if (t == 0) {
          v = cls[o];
        } else {
          const int py = (t - 1) / G, px = (t - 1) % G;
          v = bias[o];
          for (int ch = 0; ch < c.Cin; ++ch)
            for (int ky = 0; ky < c.P; ++ky)
              for (int kx = 0; kx < c.P; ++kx)
                v += w[((o * c.Cin + ch) * c.P + ky) * c.P + kx] *
                     images[((b * c.S + py * c.P + ky) * c.S + px * c.P + kx) * c.Cin + ch];
        }
        h[b * T + t][o] = v + pos[t * c.C + o];
      }

  for (int l = 0; l < c.L; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    Rows xn = ref_layernorm(h, P.at(p + "norm1.weight"), P.at(p + "norm1.bias"), c.eps);
    Rows qkv = ref_linear(xn, P.at(p + "attn.qkv.weight"), P.at(p + "attn.qkv.bias"));
    Rows att(h.size(), std::vector<double>(c.C, 0.0));
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int b = 0; b < B; ++b)
      for (int hd = 0; hd < c.H; ++hd)
        for (int i = 0; i < T; ++i) {
          std::vector<double> s(T);
          double mx = -1e300;
          for (int j = 0; j < T; ++j) {  // non-causal: every token sees every token
            double dot = 0;
            for (int e = 0; e < D; ++e) dot += qkv[b * T + i][hd * D + e] * qkv[b * T + j][c.C + hd * D + e];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          double z = 0;
          for (int j = 0; j < T; ++j) z += std::exp(s[j] - mx);
          for (int j = 0; j < T; ++j) {
            const double pj = std::exp(s[j] - mx) / z;
            for (int e = 0; e < D; ++e) att[b * T + i][hd * D + e] += pj * qkv[b * T + j][2 * c.C + hd * D + e];
          }
        }
    Rows o = ref_linear(att, P.at(p + "attn.proj.weight"), P.at(p + "attn.proj.bias"));
    for (std::size_t n = 0; n < h.size(); ++n)
      for (int i = 0; i < c.C; ++i) h[n][i] += o[n][i];
    Rows xn2 = ref_layernorm(h, P.at(p + "norm2.weight"), P.at(p + "norm2.bias"), c.eps);
    Rows f1 = ref_linear(xn2, P.at(p + "mlp.fc1.weight"), P.at(p + "mlp.fc1.bias"));
    for (auto& row : f1)
      for (double& v : row) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));  // exact GELU
    Rows f2 = ref_linear(f1, P.at(p + "mlp.fc2.weight"), P.at(p + "mlp.fc2.bias"));
    for (std::size_t n = 0; n < h.size(); ++n)
      for (int i = 0; i < c.C; ++i) h[n][i] += f2[n][i];
  }
  // timm: norm over all tokens, then the class token (global_pool='token').
  Rows hn = ref_layernorm(h, P.at("norm.weight"), P.at("norm.bias"), c.eps);
  Rows pooled;
  for (int b = 0; b < B; ++b) pooled.push_back(hn[b * T]);
  Rows logits = ref_linear(pooled, P.at("head.weight"), P.at("head.bias"));
  double total = 0;
  int count = 0;
  for (int b = 0; b < B; ++b) {
    if (labels[b] == kIgnoreIndex) continue;
    double mx = -1e300;
    for (double z : logits[b]) mx = std::max(mx, z);
    double se = 0;
    for (double z : logits[b]) se += std::exp(z - mx);
    total += mx + std::log(se) - logits[b][labels[b]];
    ++count;
  }
  return total / count;
}

// ---- the engine stand-in --------------------------------------------------------------

// The engine's role (tests/support/unit_driver.hpp). vocab_chunk 4 does not
// divide the 10 classes (ragged last chunk). Biases and norms are perturbed
// from their zero/one init so that a bias dropped or applied twice changes
// the loss.
class Driver : public ftrain::testing::UnitDriver {
 public:
  Driver(Model& model, DType compute_dtype) : UnitDriver(model, compute_dtype, /*vocab_chunk=*/4, &perturbed_init) {
    for (int u = 0; u < model.num_units(); ++u)
      for (const auto& spec : model.unit(u).params()) EXPECT_TRUE(spec.tied_to.empty()) << spec.name;
  }

 private:
  static float perturbed_init(const ParamSpec& spec, std::int64_t i) {
    const double r = rng::normal(kSeed, rng::hash_name(spec.name), static_cast<std::uint64_t>(i));
    switch (spec.init) {
      case InitKind::normal: return static_cast<float>(std::max(spec.init_std, 0.02f) * r);
      case InitKind::ones: return static_cast<float>(1.0 + 0.1 * r);
      case InitKind::zeros: return static_cast<float>(0.1 * r);
    }
    return 0.0f;
  }
};

struct FixedBatch {
  Batch batch;
  std::vector<double> images;
  std::vector<int> labels;
  int labelled = 0;
};

FixedBatch make_batch(const RefConfig& c) {
  FixedBatch f;
  const std::int64_t n = static_cast<std::int64_t>(kImages) * c.S * c.S * c.Cin;
  std::vector<float> pixels(n);
  for (std::int64_t i = 0; i < n; ++i) {
    pixels[i] = static_cast<float>(rng::normal(77, 1, i));
    f.images.push_back(pixels[i]);
  }
  f.batch.inputs = from_floats({kImages, c.S, c.S, c.Cin}, pixels);
  f.batch.targets = Tensor::empty({kImages}, DType::i32);
  for (int b = 0; b < kImages; ++b) {
    f.labels.push_back(b == 1 ? kIgnoreIndex : static_cast<int>(rng::bits(77, 2, b) % c.K));
    f.batch.targets.data_as<std::int32_t>()[b] = f.labels.back();
    f.labelled += f.labels.back() != kIgnoreIndex;
  }
  return f;
}

// Non-square-ish variant: more heads, a different patch grid and channel count.
std::vector<std::pair<const char*, ModelOverrides>> cases() {
  return {
      {"tiny", {{"initializer_range", "0.1"}}},
      {"patch4_gray_8heads",
       {{"initializer_range", "0.1"}, {"patch_size", "4"}, {"image_size", "12"}, {"num_channels", "1"},
        {"num_heads", "8"}, {"mlp_dim", "96"}, {"num_classes", "7"}}},
  };
}

}  // namespace

TEST(VitNumerics, LossMatchesFloat64Reference) {
  for (const auto& [label, overrides] : cases()) {
    auto model = make_vit(overrides);
    const RefConfig rc(model->config());
    const FixedBatch fb = make_batch(rc);
    Driver driver(*model, DType::f32);
    const double loss = driver.run(fb.batch, /*backward=*/false) / fb.labelled;
    const double ref = ref_loss(rc, driver.ref_params(), fb.images, fb.labels);
    EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref)) << label;
    EXPECT_GT(std::abs(ref - std::log(rc.K)), 1e-2) << label << ": the reference is trivially ln(classes)";
  }
}

TEST(VitNumerics, GradientsMatchFiniteDifferences) {
  for (const auto& [label, overrides] : cases()) {
    auto model = make_vit(overrides);
    const RefConfig rc(model->config());
    const FixedBatch fb = make_batch(rc);
    Driver driver(*model, DType::f32);
    driver.run(fb.batch, /*backward=*/true);
    ftrain::testing::expect_gradients_match_reference(
        driver, [&](const RefParams& p) { return ref_loss(rc, p, fb.images, fb.labels); },
        /*direction_seed=*/11, /*min_gradient_norm=*/1e-5, label);
  }
}

TEST(VitNumerics, Bf16ComputeTracksFp32) {
  auto model = make_vit({{"initializer_range", "0.1"}});
  const RefConfig rc(model->config());
  const FixedBatch fb = make_batch(rc);
  Driver f32(*model, DType::f32), bf16(*model, DType::bf16);
  const double loss32 = f32.run(fb.batch, true) / fb.labelled;
  const double loss16 = bf16.run(fb.batch, true) / fb.labelled;
  EXPECT_NEAR(loss16, loss32, 1e-2 * loss32);
  for (const auto& name : f32.names()) {
    const double err =
        relative_error(ftrain::testing::to_doubles(bf16.grad(name)), ftrain::testing::to_doubles(f32.grad(name)));
    EXPECT_LT(err, 0.1) << name;
  }
}

TEST(VitNumerics, EvalForwardSavesNothingAndMatches) {
  auto model = make_vit({});
  const RefConfig rc(model->config());
  const FixedBatch fb = make_batch(rc);
  Driver train(*model, DType::f32), eval(*model, DType::f32);
  eval.ctx().training = false;
  EXPECT_EQ(train.run(fb.batch, false), eval.run(fb.batch, false));
}

TEST(VitNumerics, WrongImageSizeIsAUserError) {
  auto model = make_vit({});
  Batch batch;
  batch.inputs = Tensor::zeros({1, 16, 16, 3}, DType::f32);
  batch.targets = Tensor::zeros({1}, DType::i32);
  UnitCache cache;
  StepContext ctx;
  std::vector<Tensor> params;
  for (const auto& spec : model->unit(0).params()) params.push_back(Tensor::zeros(spec.shape, DType::f32));
  try {
    model->unit(0).forward(ctx, params, batch, Tensor(), cache);
    FAIL() << "no error for 16x16 images into a 32x32 model";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("16x16x3"), std::string::npos) << e.what();
  }
}
