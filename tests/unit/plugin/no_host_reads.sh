#!/usr/bin/env bash
# Checks that a model plugin's step code reads no tensor data on the host
# (issue 12 items 3 and 4): no data_as<>/to_float_vector (host reads), no
# stream synchronize() (which only a host read needs), no Kokkos host loops.
# Everything a step does goes through ftrain::ops, so it runs unchanged on
# whichever backend holds the tensors. A source check: these calls compile
# to inline code, which nm (no_backend_code.sh) cannot see.
#
# usage: no_host_reads.sh SOURCE...   exit 0 when every file is clean
set -euo pipefail
status=0
pattern='data_as<|to_float_vector|synchronize\(|Kokkos::|parallel_for|parallel_reduce'
for src in "$@"; do
  if [[ ! -f "$src" ]]; then
    echo "FAIL: $src does not exist" >&2
    status=1
    continue
  fi
  # Comments may name these calls; code may not.
  hits=$(grep -nE "$pattern" "$src" | grep -vE '^[0-9]+:\s*//' || true)
  if [[ -n "$hits" ]]; then
    echo "FAIL: $src reads tensor data on the host or loops over it (use ftrain::ops):" >&2
    echo "$hits" | sed 's/^/  /' >&2
    status=1
  else
    echo "ok: $src: no host reads or host loops"
  fi
done
exit $status
