// What `parallel tensor T context C` trains with, checked before anything
// is built: every refusal names the parallel line and the line it clashes
// with.
#pragma once

#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"

namespace ftrain {

// Refuses what tensor parallelism does not train yet (precision fp8, LoRA,
// offload) and a model or a head count it cannot split; then splits `model`
// into this rank's slices (Model::split_for_tensor_parallel). Nothing
// happens for T = 1. Both backends run it (the CUDA backend has the
// vocabulary-parallel embedding and cross-entropy kernels).
void check_tensor_parallel(const RunConfig& c, const FsdpOptions& fsdp, Model& model);

// Refuses what context parallelism does not train yet (precision fp8, LoRA,
// offload) and a model without it (Model::use_context_parallel); the
// sequence length is the plan's check (parallel_layout.hpp). Nothing
// happens for C = 1.
void check_context_parallel(const RunConfig& c, const FsdpOptions& fsdp, Model& model);

// The refusals of both that need no model (precision fp8, LoRA, offload):
// what `ftrain --check` reports, which never splits the model.
void refuse_model_parallel_options(const RunConfig& c, const FsdpOptions& fsdp);

}  // namespace ftrain
