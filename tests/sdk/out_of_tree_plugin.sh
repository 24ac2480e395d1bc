#!/usr/bin/env bash
# Driver of the sdk_out_of_tree_plugin test (tests/sdk/CMakeLists.txt): the
# plugin SDK exactly as a user meets it.
#
#  1. cmake --install the ftrain build into a scratch prefix, then move the
#     prefix elsewhere: everything below must work from the moved tree
#     (RPATH $ORIGIN/../lib, plugin dir found from libftrain.so, relocatable
#     ftrainConfig.cmake).
#  2. The installed bin/ftrain lists the in-tree llama plugin from
#     <prefix>/<libdir>/ftrain/plugins (not from the build tree).
#  3. Configure and build share/doc/examples/mlp_plugin with
#     CMAKE_PREFIX_PATH=<prefix>: find_package(ftrain) + ftrain_add_plugin.
#     The plugin exports only ftrain_plugin_entry. ftrain finds it through
#     FTRAIN_PLUGIN_PATH, and, installed into (a copy of) the prefix,
#     without it.
#  4. Train it (FTRAIN_PLUGIN_PATH=<example build dir>) on a synthetic
#     Markov-chain corpus from the installed ftrain-prep:
#       a. one rank, tied embeddings: exit 0, every logged loss finite, and
#          the final eval loss well below the uniform guess ln(64) = 4.16
#          (so the gradients are right, not merely present);
#       b. two ranks under mpirun, untied, activation checkpointing on: the
#          same checks.
# Everything is left in --work-dir for inspection after a failure.
set -euo pipefail

usage() {
  echo "usage: $0 --build-dir DIR --example-dir DIR --work-dir DIR --libdir LIBDIR --cmake CMAKE" \
    "--generator GEN --cxx CXX --cc CC --mpiexec MPIEXEC --mpiexec-flags 'F1;F2'" >&2
  exit 2
}

build_dir="" example_dir="" work_dir="" libdir="" cmake_bin="" generator="" cxx="" cc="" mpiexec="" mpiexec_flags=""
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage
  case "$1" in
    --build-dir) build_dir="$2" ;;
    --example-dir) example_dir="$2" ;;
    --work-dir) work_dir="$2" ;;
    --libdir) libdir="$2" ;;
    --cmake) cmake_bin="$2" ;;
    --generator) generator="$2" ;;
    --cxx) cxx="$2" ;;
    --cc) cc="$2" ;;
    --mpiexec) mpiexec="$2" ;;
    --mpiexec-flags) mpiexec_flags="$2" ;;
    *) usage ;;
  esac
  shift 2
done
for v in build_dir example_dir work_dir libdir cmake_bin generator cxx cc mpiexec; do
  [[ -n "${!v}" ]] || { echo "$0: missing --${v//_/-}" >&2; usage; }
done
IFS=';' read -r -a mpi_flags <<<"$mpiexec_flags"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

rm -rf "$work_dir"
mkdir -p "$work_dir"
cd "$work_dir"
unset FTRAIN_PLUGIN_PATH

step "install $build_dir"
# A partial build (e.g. only a test target) can relink libftrain.so without
# relinking the executables, and an install of that mix crashes in ways that
# say nothing about the SDK: refuse it with the remedy instead.
for exe in "$build_dir/bin/ftrain" "$build_dir/bin/ftrain-prep"; do
  [[ -f "$exe" ]] || fail "$exe is not built: run cmake --build $build_dir first"
  for lib in "$build_dir"/libftrain.so.*.*; do
    [[ ! "$lib" -nt "$exe" ]] ||
      fail "$exe is older than $lib: the build is partial; run cmake --build $build_dir first"
  done
done
"$cmake_bin" --install "$build_dir" --prefix "$work_dir/staging" >install.log 2>&1 ||
  { cat install.log >&2; fail "cmake --install failed (are ftrain_exe, ftrain_prep and the plugins built?)"; }
mv "$work_dir/staging" "$work_dir/prefix"
prefix="$work_dir/prefix"
for f in bin/ftrain bin/ftrain-prep "$libdir/libftrain.so" "$libdir/ftrain/plugins/ftrain_llama.so" \
  include/ftrain/core/tensor.hpp include/ftrain/kernels/ops.hpp include/ftrain/plugin/model.hpp \
  include/ftrain/base/error.hpp include/ftrain/data/batch.hpp include/ftrain/layers/linear.hpp \
  include/ftrain/layers/lora.hpp include/ftrain/fp8/recipe.hpp \
  include/ftrain/plugin/ftrain_plugin.h "$libdir/cmake/ftrain/ftrainConfig.cmake" \
  "$libdir/cmake/ftrain/FtrainPlugin.cmake" "$libdir/cmake/ftrain/FtrainKokkos.cmake"; do
  [[ -e "$prefix/$f" ]] || fail "the install lacks $f"
done
# Engine internals are not part of the SDK.
[[ ! -e "$prefix/include/ftrain/kernels/host" ]] || fail "the install ships kernels/host (not SDK)"
[[ ! -e "$prefix/include/ftrain/data/batch_source.hpp" ]] || fail "the install ships data/ beyond batch.hpp (not SDK)"
[[ ! -e "$prefix/include/ftrain/fsdp" ]] || fail "the install ships fsdp/ (not SDK)"

step "installed ftrain lists its own plugins"
"$prefix/bin/ftrain" --list-models >list_installed.txt 2>&1 || { cat list_installed.txt >&2; fail "--list-models"; }
grep -qF "$prefix/$libdir/ftrain/plugins/ftrain_llama.so" list_installed.txt ||
  { cat list_installed.txt >&2; fail "llama was not found in $prefix/$libdir/ftrain/plugins"; }

step "configure and build the example against $prefix"
"$cmake_bin" -S "$example_dir" -B "$work_dir/example-build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >configure.log 2>&1 ||
  { cat configure.log >&2; fail "configuring the example failed"; }
"$cmake_bin" --build "$work_dir/example-build" >build.log 2>&1 ||
  { cat build.log >&2; fail "building the example failed"; }
plugin="$work_dir/example-build/ftrain_mlp.so"
[[ -f "$plugin" ]] || fail "the example build made no ftrain_mlp.so"
# Only headers from the install: no path into the ftrain source tree.
source_tree="$(cd "$example_dir/../../../.." && pwd)"
example_build_files=("$work_dir/example-build/build.ninja" "$work_dir/example-build/Makefile")
if grep -qF -- "$source_tree/src" "${example_build_files[@]}" 2>/dev/null; then
  fail "the example build uses headers from the source tree $source_tree/src"
fi
exported="$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBR]$/ {print $3}')"
[[ "$exported" == "ftrain_plugin_entry" ]] || fail "ftrain_mlp.so must export only ftrain_plugin_entry, got: $exported"

step "the example is found through FTRAIN_PLUGIN_PATH, and once installed into the prefix without it"
FTRAIN_PLUGIN_PATH="$work_dir/example-build" "$prefix/bin/ftrain" --list-models >list_with_example.txt 2>&1 ||
  { cat list_with_example.txt >&2; fail "--list-models"; }
grep -qF "$plugin" list_with_example.txt || { cat list_with_example.txt >&2; fail "mlp is not listed from $plugin"; }
cp -a "$prefix" "$work_dir/prefix-with-mlp"
"$cmake_bin" --install "$work_dir/example-build" --prefix "$work_dir/prefix-with-mlp" >install_example.log 2>&1 ||
  { cat install_example.log >&2; fail "installing the example failed"; }
"$work_dir/prefix-with-mlp/bin/ftrain" --list-models >list_installed_example.txt 2>&1 ||
  { cat list_installed_example.txt >&2; fail "--list-models"; }
grep -qF "$work_dir/prefix-with-mlp/$libdir/ftrain/plugins/ftrain_mlp.so" list_installed_example.txt ||
  { cat list_installed_example.txt >&2; fail "the installed example is not found in the prefix"; }

export FTRAIN_PLUGIN_PATH="$work_dir/example-build"

step "make a synthetic corpus"
mkdir -p data
"$prefix/bin/ftrain-prep" synthetic --out data/train.tok --tokens 50000 --vocab 64 --seed 7 \
  --eval-out data/eval.tok --eval-tokens 4096 >prep.log 2>&1 || { cat prep.log >&2; fail "ftrain-prep"; }

# check_metrics FILE: every loss / eval_loss finite, a final eval loss below 2.8.
check_metrics() {
  python3 - "$1" <<'EOF'
import json, math, sys
path = sys.argv[1]
losses, evals = [], []
with open(path) as f:
    for line in f:
        rec = json.loads(line)
        if "loss" in rec:
            losses.append(rec["loss"])
        if "eval_loss" in rec:
            evals.append(rec["eval_loss"])
if not losses:
    sys.exit(f"{path}: no loss line")
bad = [x for x in losses + evals if not math.isfinite(x)]
if bad:
    sys.exit(f"{path}: non-finite loss {bad[0]}")
if not evals:
    sys.exit(f"{path}: no eval_loss line")
# ln(64) = 4.16 is the untrained loss; the corpus' entropy rate is about 1.2.
if evals[-1] > 2.8:
    sys.exit(f"{path}: final eval_loss {evals[-1]:.3f} > 2.8: the model did not learn")
print(f"{path}: {len(losses)} loss lines, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
      f"eval_loss {evals[0]:.3f} -> {evals[-1]:.3f}")
EOF
}

deck="$example_dir/mlp_tiny.in"
step "train: 1 rank, tied embeddings"
"$prefix/bin/ftrain" -var data_dir data -var run_dir runs/one_rank -var max_steps 150 "$deck" \
  >train_one_rank.log 2>&1 ||
  { tail -n 30 train_one_rank.log >&2; fail "ftrain (1 rank) exited non-zero"; }
check_metrics runs/one_rank/metrics.jsonl || fail "1-rank metrics"

step "train: 2 ranks, untied, activation checkpointing"
"$mpiexec" "${mpi_flags[@]}" -np 2 "$prefix/bin/ftrain" -var data_dir data \
  -var run_dir runs/two_ranks -var max_steps 150 -var model_extra "tie_word_embeddings false" \
  -var checkpointing on "$deck" >train_two_ranks.log 2>&1 ||
  { tail -n 30 train_two_ranks.log >&2; fail "ftrain (2 ranks) exited non-zero"; }
grep -q "activation_checkpointing on" train_two_ranks.log || fail "the 2-rank run did not enable checkpointing"
grep -q "tie_word_embeddings=false" train_two_ranks.log || fail "the 2-rank run did not untie the embeddings"
check_metrics runs/two_ranks/metrics.jsonl || fail "2-rank metrics"

echo "PASS"
