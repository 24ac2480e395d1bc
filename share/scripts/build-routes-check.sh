#!/usr/bin/env bash
# build-routes-check.sh — the documented ways to configure ftrain generate
# build files: every CMake preset, and a plain `cmake -S . -B build` with
# each generator Debian installs (Unix Makefiles, Ninja) and each
# FTRAIN_CUDA value. Each route configures into its own temporary directory,
# removed afterwards; the source tree and build/ are not touched.
#
#   share/scripts/build-routes-check.sh        CI (.ci/run): Unix Makefiles
#       with FTRAIN_CUDA=ON, the route that once failed at generate
#       ("requires the language dialect CUDA20") while the Ninja presets
#       worked
#   share/scripts/build-routes-check.sh --all  every route above
#   ... --build TARGET...                      also build these targets in
#       each route (e.g. ftrain_cuda ftrain_exe)
#
# FTRAIN_CUDA=ON needs a CUDA toolkit (/usr/local/cuda or CMAKE_CUDA_COMPILER);
# without one that route is reported as skipped (it must fail there, and
# does: cmake/FtrainCuda.cmake). Exit status: 0 when every route that ran
# configured, generated (and built), 1 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
JOBS="${FTRAIN_JOBS:-$(nproc)}"

routes=("Unix Makefiles|ON")
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --all)
      routes=()
      for generator in "Unix Makefiles" Ninja; do
        for cuda in ON AUTO OFF; do routes+=("$generator|$cuda"); done
      done
      while read -r preset; do routes+=("preset|$preset"); done < <(
        cmake --list-presets=configure -S "$ROOT" 2>/dev/null | sed -n 's/^ *"\([^"]*\)".*/\1/p')
      shift ;;
    --build) shift; while [[ $# -gt 0 && "$1" != --* ]]; do targets+=("$1"); shift; done ;;
    *) echo "usage: $0 [--all] [--build TARGET...]" >&2; exit 2 ;;
  esac
done

have_cuda_compiler() {
  [[ -n "${CMAKE_CUDA_COMPILER:-}" ]] || command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]
}

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/ftrain-build-routes.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
passed=0
failed=()
for route in "${routes[@]}"; do
  kind="${route%%|*}"
  value="${route#*|}"
  dir="$SCRATCH/route-$((passed + ${#failed[@]}))"
  if [[ "$kind" == preset ]]; then
    label="cmake --preset $value"
    cmd=(cmake --preset "$value" -S "$ROOT" -B "$dir")
  else
    label="cmake -S . -B build -G \"$kind\" -DFTRAIN_CUDA=$value"
    if [[ "$value" == ON ]] && ! have_cuda_compiler; then
      echo "skipped: $label (no CUDA toolkit on this machine)"
      continue
    fi
    cmd=(cmake -S "$ROOT" -B "$dir" -G "$kind" "-DFTRAIN_CUDA=$value")
  fi
  t0=$(date +%s)
  log="$SCRATCH/$(basename "$dir").log"
  # The generate step's errors ("CMake Error in CMakeLists.txt: Target ...")
  # come after "Configuring done": only cmake's exit status tells.
  if "${cmd[@]}" >"$log" 2>&1 && { [[ ${#targets[@]} -eq 0 ]] ||
        cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" >>"$log" 2>&1; }; then
    passed=$((passed + 1))
    echo "ok: $label ($(( $(date +%s) - t0 )) s$([[ ${#targets[@]} -gt 0 ]] && echo ", built ${targets[*]}"))"
  else
    failed+=("$label")
    echo "FAILED: $label; its output:"
    grep -v "^-- " "$log" | tail -40
  fi
done
echo "build routes: $passed passed, ${#failed[@]} failed"
[[ ${#failed[@]} -eq 0 ]]
