// Tensor storage through the device allocators (issue 12): a CUDA tensor is
// refused only because no CUDA backend is loaded, with a message naming the
// tensor; borrowed tensors do not keep storage alive, so a read after the
// owner released it sees the debug allocator's poison.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "runtime/allocator.hpp"

using namespace ftrain;

TEST(TensorStorage, CudaTensorWithoutBackendNamesTensorAndBackend) {
  try {
    Tensor::empty({2, 3}, DType::bf16, Device::cuda, "model.layers.0.mlp.up_proj.weight");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA backend is loaded"), std::string::npos) << m;
  }
}

TEST(TensorStorage, BorrowedTensorDoesNotOwnAndSeesPoisonAfterRelease) {
  HostAllocatorOptions o;
  o.debug = true;
  HostAllocator debug(o);
  DeviceAllocator* previous = register_allocator(Device::host, &debug);
  {
    Tensor borrowed;
    {
      Tensor owner = Tensor::zeros({16}, DType::f32, Device::host, "gathered");
      EXPECT_TRUE(owner.owns_storage());
      borrowed = owner.view({8}, 4).borrow();
      EXPECT_FALSE(borrowed.owns_storage());
      EXPECT_TRUE(borrowed.defined());
      EXPECT_EQ(to_float_vector(borrowed)[0], 0.0f);
    }
    // The owner is gone: the block is back in the allocator, poisoned.
    EXPECT_TRUE(std::isnan(to_float_vector(borrowed)[0])) << "a use after release reads NaN in debug mode";
  }
  register_allocator(Device::host, previous);
}
