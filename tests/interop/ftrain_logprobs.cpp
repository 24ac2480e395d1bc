// ftrain_logprobs: ftrain's own forward pass on a fixed batch, for the interop
// tests to compare with transformers / timm.
//
//   ftrain_logprobs --plugin-dir DIR --model llama [--preset P] [--set key=value]...
//                   --weights (FILE.h5 | FILE.safetensors | DIR) --inputs FILE --shape B,T --out FILE
//                   [--documents FILE [--positions restart|continue]]
//   ftrain_logprobs --plugin-dir DIR --model vit --preset vit-b16 --list-params
//                   (every parameter the units declare, "name d0,d1,..." per line: the layout
//                   a checkpoint must have, compared with timm's state_dict by the tests)
//
// Loads the model through the plugin loader (the same .so ftrain runs), reads
// every parameter from a consolidated state dict (save_final's HDF5) or from
// Hugging Face safetensors (a file or a sharded directory: the readers `init
// hdf5` and `init safetensors` use), runs the units forward in f32 exactly as
// the engine does (eval mode), and writes float32 log-probabilities:
// [B, T, vocab] for a language model (inputs: int32 tokens [B, T]), [B,
// classes] for a vision model (inputs: float32 NHWC images [B, H, W, C]).
// --documents gives a packed batch's int32 document ids [B, T] (Batch::documents,
// the attention document mask); its RoPE positions restart at each document
// as training's do (data::fill_document_positions) unless --positions continue.
//
// Why log-probabilities and not logits: a head unit returns only the SUM of
// its cross-entropy losses (ops::cross_entropy_forward never materialises the
// logits, it streams vocabulary chunks). The head is therefore run once per
// (row, class) with that single target, which gives -log_softmax(logits)[row,
// class] from ftrain's own head; log-softmax is the logits up to one constant
// per row, i.e. the model's whole output distribution. The trunk runs once.
#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/consolidated.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "base/error.hpp"
#include "core/tensor.hpp"
#include "data/token_dataset.hpp"
#include "kernels/ops.hpp"
#include "plugin/loader.hpp"
#include "plugin/model.hpp"

namespace {

using namespace ftrain;

struct Args {
  std::string plugin_dir, model, preset = "tiny", weights, inputs, out, documents, positions = "restart";
  bool list_params = false;
  ModelOverrides overrides;
  Shape shape;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "ftrain_logprobs: " << why
            << "\nusage: ftrain_logprobs --plugin-dir DIR --model NAME [--preset P] [--set key=value]... "
               "--weights PATH --inputs FILE --shape B,T[,...] --out FILE\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--list-params") {
      a.list_params = true;
      continue;
    }
    if (i + 1 >= argc) usage(k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--plugin-dir") a.plugin_dir = v;
    else if (k == "--model") a.model = v;
    else if (k == "--preset") a.preset = v;
    else if (k == "--weights") a.weights = v;
    else if (k == "--inputs") a.inputs = v;
    else if (k == "--out") a.out = v;
    else if (k == "--documents") a.documents = v;
    else if (k == "--positions") a.positions = v;
    else if (k == "--set") {
      const auto eq = v.find('=');
      if (eq == std::string::npos) usage("--set " + v + ": expected key=value");
      a.overrides.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (k == "--shape") {
      std::stringstream ss(v);
      std::string part;
      while (std::getline(ss, part, ',')) a.shape.push_back(std::stoll(part));
    } else {
      usage("unknown option " + k);
    }
  }
  if (a.positions != "restart" && a.positions != "continue") usage("--positions " + a.positions + ": restart or continue");
  if (a.list_params && !a.plugin_dir.empty() && !a.model.empty()) return a;
  if (a.plugin_dir.empty() || a.model.empty() || a.weights.empty() || a.inputs.empty() || a.out.empty() ||
      a.shape.empty())
    usage("missing option");
  return a;
}

// Reads parameters by Hugging Face / timm name from either checkpoint kind.
class WeightReader {
 public:
  explicit WeightReader(const std::string& path) : path_(path) {
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0) {
      ckpt::h5::quiet();
      h5_ = std::make_unique<ckpt::h5::File>(ckpt::h5::File::open_read(path));
    } else {
      st_ = std::make_unique<ckpt::SafetensorsSource>(path);
    }
  }

  Tensor read(const ParamSpec& spec) const {
    Tensor t = Tensor::empty(spec.shape, DType::f32, Device::host, spec.name);
    if (st_) {
      const auto& info = st_->tensor(spec.name);  // UserError naming file and tensor when absent
      if (info.shape != spec.shape)
        FT_USER_ERROR() << path_ << ": tensor '" << spec.name << "' has shape " << shape_string(info.shape)
                        << ", the model expects " << shape_string(spec.shape);
      st_->read_into(spec.name, 0, t.numel(), t.data_as<float>());
      return t;
    }
    ckpt::h5::Handle set(H5Dopen2(h5_->id(), spec.name.c_str(), H5P_DEFAULT), H5Dclose);
    if (set.id() < 0) FT_USER_ERROR() << path_ << ": no dataset '" << spec.name << "'";
    ckpt::h5::Handle space(H5Dget_space(set.id()), H5Sclose);
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space.id()))));
    H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
    const Shape shape(dims.begin(), dims.end());
    if (shape != spec.shape)
      FT_USER_ERROR() << path_ << ": dataset '" << spec.name << "' has shape " << shape_string(shape)
                      << ", the model expects " << shape_string(spec.shape);
    ckpt::read_consolidated_range(set.id(), path_, spec.name, dims, 0, t.numel(), t.data_as<float>());
    return t;
  }

 private:
  std::string path_;
  std::unique_ptr<ckpt::h5::File> h5_;
  std::unique_ptr<ckpt::SafetensorsSource> st_;
};

std::vector<char> read_file(const std::string& path, std::size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FT_USER_ERROR() << "cannot open " << path;
  std::vector<char> data(bytes);
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  if (static_cast<std::size_t>(in.gcount()) != bytes || in.peek() != EOF)
    FT_USER_ERROR() << path << ": expected exactly " << bytes << " bytes for the given --shape";
  return data;
}

int run(const Args& args) {
  ModelHandle model = PluginLoader({args.plugin_dir}).create_model(args.model, args.preset, args.overrides);
  if (args.list_params) {
    for (int u = 0; u < model->num_units(); ++u)
      for (const auto& spec : model->unit(u).params()) {
        if (!spec.tied_to.empty()) continue;  // an alias: the checkpoint holds it under its owner's name
        std::cout << spec.name << " ";
        for (std::size_t d = 0; d < spec.shape.size(); ++d) std::cout << (d ? "," : "") << spec.shape[d];
        std::cout << "\n";
      }
    return 0;
  }
  const bool language = model->data_kind() == DataKind::tokens;
  const std::int64_t classes = model->output_size();

  // Parameters, tied slots resolved to their owner (as the engine does).
  WeightReader weights(args.weights);
  std::map<std::string, Tensor> owned;
  std::vector<std::vector<Tensor>> params(static_cast<std::size_t>(model->num_units()));
  for (int u = 0; u < model->num_units(); ++u) {
    for (const auto& spec : model->unit(u).params()) {
      if (!spec.tied_to.empty()) {
        params[u].push_back(owned.at(spec.tied_to));
        continue;
      }
      owned[spec.name] = weights.read(spec);
      params[u].push_back(owned[spec.name]);
    }
  }

  // The fixed batch.
  Batch batch;
  const std::int64_t B = args.shape.at(0);
  const std::int64_t numel = shape_numel(args.shape);
  batch.inputs = Tensor::empty(args.shape, language ? DType::i32 : DType::f32);
  const auto bytes = read_file(args.inputs, static_cast<std::size_t>(numel) * 4);
  std::memcpy(batch.inputs.data(), bytes.data(), bytes.size());
  const Shape target_shape = language ? args.shape : Shape{B};
  batch.targets = Tensor::empty(target_shape, DType::i32);
  std::int32_t* targets = batch.targets.data_as<std::int32_t>();
  std::fill(targets, targets + batch.targets.numel(), 0);
  if (!args.documents.empty()) {
    batch.documents = Tensor::empty(args.shape, DType::i32);
    const auto ids = read_file(args.documents, static_cast<std::size_t>(numel) * 4);
    std::memcpy(batch.documents.data(), ids.data(), ids.size());
    if (args.positions == "restart") {
      batch.positions = Tensor::empty(args.shape, DType::i32);
      data::fill_document_positions(batch.documents, batch.positions);
    }
  }

  StepContext ctx;
  ctx.training = false;
  ctx.compute_dtype = DType::f32;
  const int head = model->num_units() - 1;
  Tensor x;
  for (int u = 0; u < head; ++u) {
    UnitCache cache;
    x = model->unit(u).forward(ctx, params[u], batch, x, cache);
  }

  // Rows the head scores: one per token (language), one per image (vision);
  // each is fed to the head alone with one target at a time.
  const std::int64_t rows = language ? numel : B;
  const std::int64_t row_elems = x.numel() / rows;
  Shape row_shape = x.shape();  // the head's input for one row: leading dimension 1 (or T/B for [B*T, C])
  row_shape[0] = x.shape()[0] / rows;
  std::vector<float> out(static_cast<std::size_t>(rows * classes));
  Batch one;
  one.inputs = batch.inputs.view(language ? Shape{1, 1} : Shape{1, args.shape[1], args.shape[2], args.shape[3]});
  one.targets = Tensor::empty(language ? Shape{1, 1} : Shape{1}, DType::i32);
  for (std::int64_t r = 0; r < rows; ++r) {
    const Tensor row = x.view(row_shape, r * row_elems);
    for (std::int64_t c = 0; c < classes; ++c) {
      one.targets.data_as<std::int32_t>()[0] = static_cast<std::int32_t>(c);
      UnitCache cache;
      const Tensor loss = model->unit(head).forward(ctx, params[head], one, row, cache);
      out[static_cast<std::size_t>(r * classes + c)] = -to_float_vector(loss)[0];
    }
  }
  std::ofstream file(args.out, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  if (!file.flush()) FT_USER_ERROR() << "cannot write " << args.out;
  std::cout << "ftrain_logprobs: " << rows << " rows x " << classes << " classes -> " << args.out << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "ftrain_logprobs: " << e.what() << "\n";
    return 1;
  }
}
