#!/usr/bin/env bash
# Checks that model plugins contain no backend code (issue 12): a plugin
# reaches kernels only through ftrain::ops::* (the one dispatch, compiled into
# libftrain), never ftrain::host::* (or ftrain::cuda::*) directly, whether
# defined inside it (inline kernels) or imported (an inline dispatch
# compiled into the plugin, as before ABI 2). Such a plugin could never run
# on a backend loaded later.
#
# usage: no_backend_code.sh LIBRARY...   exit 0 when every library is clean
set -euo pipefail
status=0
for lib in "$@"; do
  if [[ ! -f "$lib" ]]; then
    echo "FAIL: $lib does not exist" >&2
    status=1
    continue
  fi
  symbols=$(nm -DC "$lib")
  # Sanity: we are reading a plugin's dynamic symbol table.
  if ! grep -q "ftrain_plugin_entry" <<<"$symbols"; then
    echo "FAIL: $lib exports no ftrain_plugin_entry (not a plugin?)" >&2
    status=1
    continue
  fi
  backend=$(grep -E "ftrain::(host|cuda)::" <<<"$symbols" || true)
  if [[ -n "$backend" ]]; then
    echo "FAIL: $lib contains or imports backend code (call ftrain::ops::<op>(ctx, ...) instead):" >&2
    echo "$backend" | sed 's/^/  /' >&2
    status=1
  else
    echo "ok: $lib: no ftrain::host:: / ftrain::cuda:: symbols ($(grep -c 'ftrain::ops::' <<<"$symbols") ftrain::ops:: imports)"
  fi
done
exit $status
