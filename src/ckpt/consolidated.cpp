// Consolidated HDF5 state dict (see consolidated.hpp).
#include "ckpt/consolidated.hpp"

#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "ckpt/collective_errors.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/safetensors.hpp"
#include "comm/mpi_communicator.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

namespace {

std::vector<hsize_t> dims_of(const FlatEntry& entry) {
  FT_CHECK(!entry.shape.empty()) << entry.name << " has no shape";
  return std::vector<hsize_t>(entry.shape.begin(), entry.shape.end());
}

// The dataset of an entry is its Hugging Face tensor: a tensor rank's slice
// (parallel tensor) writes its elements' region of it.
h5::Handle file_selection(const FlatEntry& entry, std::int64_t first, std::int64_t count) {
  const FlatEntry full = full_entry(entry);
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  if (count > 0)
    for_each_full_run(entry, first, count, [&](std::int64_t full_first, std::int64_t n, std::int64_t) {
      runs.emplace_back(full_first, n);
    });
  return h5::flat_ranges_selection(dims_of(full), runs);
}

// TEST-ONLY fault injection. FTRAIN_TEST_FAULT_CONSOLIDATED=RANK:INDEX:PHASE
// makes rank RANK fail at the INDEX-th dataset (0-based, in write order) of
// every consolidated save, as a failed piece preparation would (PHASE
// `select`, before the collective write) or as a failed H5Dwrite would
// (PHASE `write`, after taking part in it). Only the tests set it
// (tests/checkpoint/checkpoint_test.py, scenario consolidated_fault); it
// proves that one rank's failure ends the whole save with the message
// instead of a hang.
struct InjectedFault {
  bool active = false;
  std::size_t dataset = 0;
  bool at_write = false;
};

InjectedFault injected_fault(int rank) {
  InjectedFault fault;
  const char* spec = std::getenv("FTRAIN_TEST_FAULT_CONSOLIDATED");
  if (spec == nullptr || *spec == '\0') return fault;
  int fault_rank = -1;
  unsigned long index = 0;
  char phase[16] = {0};
  FT_CHECK(std::sscanf(spec, "%d:%lu:%15s", &fault_rank, &index, phase) == 3 &&
           (std::string(phase) == "select" || std::string(phase) == "write"))
      << "FTRAIN_TEST_FAULT_CONSOLIDATED=" << spec << ": expected RANK:INDEX:select|write";
  fault.active = fault_rank == rank;
  fault.dataset = index;
  fault.at_write = std::string(phase) == "write";
  return fault;
}

// Every rank runs the same sequence of collective HDF5 calls; a failure on
// one rank is agreed on (agree_on_failure) before the next collective call,
// so every rank throws at the same point and the collective closes of the
// RAII handles (H5Dclose, H5Fclose) run in step on every rank.
void write_consolidated(FsdpEngine& engine, Communicator& world, const std::string& tmp, hid_t file,
                        const std::string& model_name, const std::map<std::string, std::string>& model_config,
                        bool bf16_bits) {
  const InjectedFault fault = injected_fault(world.rank());
  auto agree = [&](const std::string& mine) {
    const std::string failure = agree_on_failure(world, mine);
    if (!failure.empty()) FT_USER_ERROR() << failure;
  };
  // Attributes and dataset creation are collective metadata operations: every
  // rank does the same calls with the same values.
  agree(failure_of([&] {
    h5::write_attr_i64(file, "ftrain_consolidated_format", kConsolidatedFormatVersion, tmp);
    h5::write_attr_i64(file, "step", engine.optimizer_steps(), tmp);
    h5::write_attr_string(file, "model_type", model_name, tmp);
    for (const auto& [key, value] : model_config) h5::write_attr_string(file, key.c_str(), value, tmp);
    if (bf16_bits) h5::write_attr_string(file, kBf16AttributeName, kBf16AttributeValue, tmp);
  }));

  const bool writer = engine.replica_comm() == nullptr || engine.replica_comm()->rank() == 0;
  // A tensor held whole by every tensor rank is written by tensor rank 0.
  const bool writes_whole_tensors = engine.model_parallel().tensor_rank() == 0;
  h5::Handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  H5Pset_dxpl_mpio(dxpl.id(), H5FD_MPIO_COLLECTIVE);
  float dummy = 0.0f;
  std::vector<std::uint16_t> bits;  // one piece at a time (bf16 only)
  std::size_t index = 0;            // datasets written so far (fault injection)
  for (const auto& flat : engine.units()) {
    // This rank's piece of each entry (at most one: the shard is contiguous).
    std::vector<std::array<std::int64_t, 3>> piece(flat->entries().size(), {0, 0, 0});
    flat->for_each_shard_piece([&](int e, std::int64_t first, std::int64_t count, std::int64_t at) {
      piece[static_cast<std::size_t>(e)] = {first, count, at};
    });
    Tensor master;  // this rank's shard as host memory, read once when needed
    for (std::size_t e = 0; e < flat->entries().size(); ++e, ++index) {
      const FlatEntry& entry = flat->entries()[e];
      const auto dims = dims_of(full_entry(entry));
      h5::Handle full(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
      h5::Handle set(H5Dcreate2(file, entry.name.c_str(), bf16_bits ? H5T_STD_U16LE : H5T_IEEE_F32LE, full.id(),
                                H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose);
      h5::Handle space, memory;
      const void* buffer = &dummy;
      agree(failure_of([&] {
        if (set.id() < 0) FT_USER_ERROR() << "save_final " << tmp << ": cannot create dataset '" << entry.name << "'";
        if (bf16_bits) h5::write_attr_string(set.id(), kBf16AttributeName, kBf16AttributeValue, tmp);
        const std::int64_t count = writer && (entry.tensor_split() || writes_whole_tensors) ? piece[e][1] : 0;
        space = file_selection(entry, piece[e][0], count);
        const hsize_t mem_dims[1] = {static_cast<hsize_t>(std::max<std::int64_t>(1, count))};
        memory = h5::Handle(H5Screate_simple(1, mem_dims, nullptr), H5Sclose);
        if (count == 0) H5Sselect_none(memory.id());
        if (count > 0 && !master.defined()) master = master_host_f32(*flat);  // a device or bf16 shard: one copy per unit
        const float* src = count > 0 ? master.data_as<float>() + piece[e][2] : &dummy;
        buffer = src;
        if (bf16_bits) {
          bits.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, count)));
          for (std::int64_t i = 0; i < count; ++i) bits[static_cast<std::size_t>(i)] = to_bf16(src[i]).bits;
          buffer = bits.data();
        }
        if (fault.active && !fault.at_write && fault.dataset == index)
          FT_USER_ERROR() << "save_final " << tmp << ": preparing '" << entry.name
                          << "' failed (FTRAIN_TEST_FAULT_CONSOLIDATED)";
      }));
      // Every rank takes part in the collective write, then they agree on
      // its outcome before the next dataset's collective create.
      const herr_t status = H5Dwrite(set.id(), bf16_bits ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, memory.id(),
                                     space.id(), dxpl.id(), buffer);
      std::string failure;
      if (status < 0)
        failure = "save_final " + tmp + ": writing '" + entry.name + "' failed (disk full?)";
      else if (fault.active && fault.at_write && fault.dataset == index)
        failure = "save_final " + tmp + ": writing '" + entry.name + "' failed (FTRAIN_TEST_FAULT_CONSOLIDATED)";
      agree(failure);
    }
  }
}

}  // namespace

void save_consolidated(FsdpEngine& engine, Communicator& world, const std::string& path,
                       const std::string& model_name, const std::map<std::string, std::string>& model_config,
                       DType stored) {
  FT_CHECK(stored == DType::f32 || stored == DType::bf16) << "save_final dtype " << dtype_name(stored);
  auto* mpi = dynamic_cast<MpiCommunicator*>(&world);
  FT_CHECK(mpi != nullptr) << "save_final needs an MPI communicator";
  h5::quiet();
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_mpio(fapl.id(), mpi->handle(), MPI_INFO_NULL);
  const std::string tmp = path + ".tmp";
  h5::Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), H5Fclose);
  // Every rank learns whether the create worked before anything else is collective.
  const std::int64_t failed = world.all_reduce_sum(static_cast<std::int64_t>(file.id() < 0));
  if (failed > 0) FT_USER_ERROR() << "save_final: cannot create " << tmp << " (on " << failed << " rank(s))";
  try {
    write_consolidated(engine, world, tmp, file.id(), model_name, model_config, stored == DType::bf16);
  } catch (const UserError&) {
    // Every rank is here (the failure was agreed on): close collectively and
    // leave no half-written file behind.
    file.reset();
    if (world.rank() == 0) std::remove(tmp.c_str());
    throw;
  }
  const hid_t id = file.release();
  const std::string closed =
      H5Fclose(id) < 0 ? "save_final: closing " + tmp + " failed (disk full?)" : std::string();
  const std::string failure = agree_on_failure(world, closed);
  if (!failure.empty()) FT_USER_ERROR() << failure;
  const std::string renamed = world.rank() == 0 && std::rename(tmp.c_str(), path.c_str()) != 0
                                  ? "save_final: cannot rename " + tmp + " to " + path
                                  : std::string();
  const std::string rename_failure = agree_on_failure(world, renamed);  // also the barrier after the rename
  if (!rename_failure.empty()) FT_USER_ERROR() << rename_failure;
}

bool consolidated_dataset_is_bf16(hid_t dataset, const std::string& path, const std::string& name) {
  h5::Handle type(H5Dget_type(dataset), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.id());
  if (cls == H5T_FLOAT) return false;
  bool marked = false;
  if (H5Aexists(dataset, kBf16AttributeName) > 0) {
    h5::Handle attr(H5Aopen(dataset, kBf16AttributeName, H5P_DEFAULT), H5Aclose);
    h5::Handle atype(H5Aget_type(attr.id()), H5Tclose);
    if (H5Tget_class(atype.id()) == H5T_STRING && !H5Tis_variable_str(atype.id())) {
      std::string value(H5Tget_size(atype.id()), '\0');
      if (H5Aread(attr.id(), atype.id(), value.data()) >= 0) marked = value.c_str() == std::string(kBf16AttributeValue);
    }
  }
  if (cls == H5T_INTEGER && H5Tget_size(type.id()) == 2 && H5Tget_sign(type.id()) == H5T_SGN_NONE && marked)
    return true;
  FT_USER_ERROR() << path << ": dataset '" << name << "' is not floating point (nor uint16 bfloat16 bits with "
                  << "attribute " << kBf16AttributeName << " = \"" << kBf16AttributeValue << "\")";
}

void read_consolidated_range(hid_t dataset, const std::string& path, const std::string& name,
                             const std::vector<hsize_t>& dims, std::int64_t first, std::int64_t count, float* dst) {
  const bool bf16_bits = consolidated_dataset_is_bf16(dataset, path, name);
  h5::Handle space = h5::flat_range_selection(dims, first, count);
  const hsize_t mem_dims[1] = {static_cast<hsize_t>(std::max<std::int64_t>(1, count))};
  h5::Handle memory(H5Screate_simple(1, mem_dims, nullptr), H5Sclose);
  if (count == 0) return;
  if (!bf16_bits) {
    if (H5Dread(dataset, H5T_NATIVE_FLOAT, memory.id(), space.id(), H5P_DEFAULT, dst) < 0)
      FT_USER_ERROR() << path << ": reading '" << name << "' failed (damaged file?)";
    return;
  }
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(count));
  if (H5Dread(dataset, H5T_NATIVE_UINT16, memory.id(), space.id(), H5P_DEFAULT, bits.data()) < 0)
    FT_USER_ERROR() << path << ": reading '" << name << "' failed (damaged file?)";
  for (std::size_t i = 0; i < bits.size(); ++i) dst[i] = to_float(bf16{bits[i]});
}

void check_consolidated(const std::string& path, const std::vector<FlatEntry>& parameters) {
  h5::File file = h5::File::open_read(path);
  for (const FlatEntry& entry : parameters) {
    if (H5Lexists(file.id(), entry.name.c_str(), H5P_DEFAULT) <= 0)
      FT_USER_ERROR() << path << " has no dataset '" << entry.name << "' (shape " << shape_string(entry.shape) << ")";
    h5::Handle set(H5Dopen2(file.id(), entry.name.c_str(), H5P_DEFAULT), H5Dclose);
    if (set.id() < 0) FT_USER_ERROR() << path << ": dataset '" << entry.name << "' cannot be opened (damaged?)";
    consolidated_dataset_is_bf16(set.id(), path, entry.name);
    h5::Handle space(H5Dget_space(set.id()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.id());
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(0, rank)));
    H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
    const Shape shape(dims.begin(), dims.end());
    if (shape != entry.shape)
      FT_USER_ERROR() << path << ": dataset '" << entry.name << "' has shape " << shape_string(shape)
                      << ", the model expects " << shape_string(entry.shape);
  }
}

void load_consolidated(FsdpEngine& engine, const std::string& path) {
  h5::File file = h5::File::open_read(path);
  engine.init_from([&](const FlatEntry& entry, std::int64_t first, std::int64_t count, float* dst) {
    h5::Handle set(H5Dopen2(file.id(), entry.name.c_str(), H5P_DEFAULT), H5Dclose);
    if (set.id() < 0) FT_USER_ERROR() << path << ": dataset '" << entry.name << "' is missing";
    read_consolidated_range(set.id(), path, entry.name, dims_of(entry), first, count, dst);
    // As safetensors: non-finite initial weights stop here, named (issue 35).
    check_finite_weights(dst, static_cast<std::size_t>(count), "HDF5 file " + path + ": dataset '" + entry.name + "'",
                         first);
  });
}

}  // namespace ftrain::ckpt
