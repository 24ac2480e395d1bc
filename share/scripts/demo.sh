#!/usr/bin/env bash
# README command 1: installs the Debian packages, builds ftrain, makes the
# synthetic corpus and trains the tiny Llama on 2 CPU ranks.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ftrain_install_and_build
cd "$FTRAIN_ROOT"
mkdir -p data
if [[ ! -f data/tiny_train.tok || ! -f data/tiny_eval.tok ]]; then
  "$FTRAIN_BUILD_DIR/bin/ftrain-prep" synthetic --out data/tiny_train.tok --tokens 1000000 --vocab 256 \
    --seed 7 --eval-out data/tiny_eval.tok --eval-tokens 16384
fi
"${MPIRUN[@]}" -np 2 "$FTRAIN_BUILD_DIR/bin/ftrain" inputs/tiny_llama.in
