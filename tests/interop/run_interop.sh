#!/bin/sh
# run_interop.sh PYTHON SCRIPT ARGS...: runs an interop test with the venv's
# interpreter. Without one the test is skipped (exit 77, CTest SKIP_RETURN_CODE)
# with the reason, except under CI, where the interop tests must run: there a
# missing environment is a failure.
python="$1"
shift
if [ "$python" = "OFF" ]; then
  why="switched off on purpose (FTRAIN_INTEROP=off / FTRAIN_INTEROP_PYTHON=OFF)"
elif [ -z "$python" ] || [ ! -x "$python" ]; then
  why="no interop environment (FTRAIN_INTEROP_PYTHON='$python'): build it with share/scripts/interop-venv.sh, or run share/scripts/test.sh"
fi
if [ -n "${why:-}" ]; then
  if [ -n "$CI" ]; then
    echo "FAIL under CI: $why" >&2
    exit 1
  fi
  echo "SKIP: $why" >&2
  exit 77
fi
exec "$python" "$@"
