#!/usr/bin/env bash
# README command 2 (and CI, via .ci/run): installs the Debian packages,
# builds ftrain and runs the default test suite: every test except those
# labelled slow (run them with: ctest --test-dir build -L slow). GPU tests
# skip themselves where no GPU exists. The interop tests (label interop) run
# against the real Hugging Face libraries in a venv this command builds once
# and reuses (share/scripts/interop-venv.sh; FTRAIN_INTEROP=off skips them
# outside CI).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ftrain_install_and_build --interop
cd "$FTRAIN_ROOT"
ctest --test-dir "$FTRAIN_BUILD_DIR" --output-on-failure -j "$FTRAIN_JOBS" -LE slow "$@"
