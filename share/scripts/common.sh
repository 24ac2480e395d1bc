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

ftrain_install_and_build() {
  bash "$FTRAIN_ROOT/share/scripts/install-deps.sh"
  cd "$FTRAIN_ROOT"
  cmake --preset "$FTRAIN_PRESET" -B "$FTRAIN_BUILD_DIR"
  cmake --build "$FTRAIN_BUILD_DIR" -j "$FTRAIN_JOBS"
}
