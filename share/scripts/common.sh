# Shared by demo.sh and test.sh: install dependencies, configure and build.
# Sourced, not run. Honours FTRAIN_BUILD_DIR (default: build) and
# FTRAIN_PRESET (default: default; see CMakePresets.json).
set -euo pipefail
FTRAIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FTRAIN_BUILD_DIR="${FTRAIN_BUILD_DIR:-$FTRAIN_ROOT/build}"
FTRAIN_PRESET="${FTRAIN_PRESET:-default}"
FTRAIN_JOBS="${FTRAIN_JOBS:-$(nproc)}"

# mpirun refuses root unless told; containers and CI often run as root.
MPIRUN=(mpirun --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi

# `ftrain_install_and_build --interop` also builds (or reuses) the interop
# tests' Python environment and hands its interpreter to CMake. It is skipped
# only when asked (FTRAIN_INTEROP=off, refused under CI=true); a failure to
# build it fails the command.
ftrain_install_and_build() {
  bash "$FTRAIN_ROOT/share/scripts/install-deps.sh"
  cd "$FTRAIN_ROOT"
  local cmake_args=()
  if [[ "${1:-}" == "--interop" ]]; then
    if [[ "${FTRAIN_INTEROP:-on}" == "off" ]]; then
      if [[ -n "${CI:-}" ]]; then
        echo "FTRAIN_INTEROP=off is not allowed in CI: the interop tests must run there" >&2
        return 1
      fi
      echo "FTRAIN_INTEROP=off: the interop tests will be skipped" >&2
      cmake_args+=(-DFTRAIN_INTEROP_PYTHON=OFF)
    else
      local python
      python="$(bash "$FTRAIN_ROOT/share/scripts/interop-venv.sh" | tail -n 1)"
      cmake_args+=("-DFTRAIN_INTEROP_PYTHON=$python")
    fi
  fi
  cmake --preset "$FTRAIN_PRESET" -B "$FTRAIN_BUILD_DIR" "${cmake_args[@]}"
  cmake --build "$FTRAIN_BUILD_DIR" -j "$FTRAIN_JOBS"
}
