// Op tests written once, run on every backend present.
//
// A test suite declared with FTRAIN_BACKEND_TEST_SUITE runs each of its
// TEST_P bodies once per registered ops backend (kernels/backend_registry.hpp)
// and stream kind: "host" (synchronous stream) and "host_async" (the same
// kernels enqueued on a worker-thread stream, with borrowed tensors) today;
// a CUDA backend that registers itself inherits the whole suite. The body
// calls ops through backend_ctx(); the helpers of op_test_util.hpp make
// their tensors on the backend's device and read results back after waiting
// for the backend's streams, so the float64 references and tolerances are
// the same for every backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/backend_registry.hpp"
#include "kernels/ops.hpp"
#include "runtime/execution_context.hpp"

namespace ftrain::testing {

struct BackendCase {
  std::string name;  // "host", "host_async", "cuda", ...
  Device device = Device::host;
  bool asynchronous = false;
};

inline std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  for (const OpTable* t : registered_backends()) {
    out.push_back({t->name, t->device, false});
    out.push_back({std::string(t->name) + "_async", t->device, true});
  }
  return out;
}

// gtest prints the case by name ("host_async"), not as bytes.
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

inline std::string backend_case_name(const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; }

// The context of the backend test running on this thread (null outside one).
inline ExecutionContext*& current_backend_context() {
  static thread_local ExecutionContext* context = nullptr;
  return context;
}

inline ExecutionContext& backend_ctx() {
  ExecutionContext* c = current_backend_context();
  return c != nullptr ? *c : host_context();
}

// Waits for the backend's streams (rethrowing an error of enqueued work).
inline void backend_synchronize() { backend_ctx().synchronize(); }

class BackendTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    ExecutionOptions o;
    o.device = GetParam().device;
    o.asynchronous = GetParam().asynchronous;
    context_ = std::make_unique<ExecutionContext>(o);
    current_backend_context() = context_.get();
  }
  void TearDown() override {
    context_->synchronize();
    current_backend_context() = nullptr;
    context_.reset();
  }

 private:
  std::unique_ptr<ExecutionContext> context_;
};

}  // namespace ftrain::testing

// class Suite + its instantiation over backend_cases(); TEST_P(Suite, ...) follow.
#define FTRAIN_BACKEND_TEST_SUITE(Suite)                                                             \
  class Suite : public ::ftrain::testing::BackendTest {};                                          \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(::ftrain::testing::backend_cases()), \
                           ::ftrain::testing::backend_case_name)
