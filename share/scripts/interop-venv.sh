#!/usr/bin/env bash
# Builds (or reuses) the interop test environment: a virtual environment over
# Debian's python3-torch with the Hugging Face libraries pinned in
# tests/interop/requirements.txt. Prints the environment's interpreter on the
# last line of stdout (test.sh hands it to CMake as FTRAIN_INTEROP_PYTHON);
# everything else goes to stderr.
#
# Why --no-deps: the requirements file is a complete lock, so pip resolves
# nothing and can never replace Debian's torch or numpy (a PyPI torch 2.x
# wheel would also be ~800 MB and CUDA-flavoured). The check after install
# proves it: torch and numpy must import from /usr/lib/python3/dist-packages.
#
# Reuse: the sha256 of the requirements file (and of this script) is stored in
# the environment; a matching stamp skips pip entirely, a different one
# rebuilds from scratch. FTRAIN_INTEROP_VENV overrides the location
# (default: .venv-interop at the repository root, ignored by git).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
requirements="$root/tests/interop/requirements.txt"
venv="${FTRAIN_INTEROP_VENV:-$root/.venv-interop}"
python="$venv/bin/python"
stamp="$venv/ftrain-requirements.sha256"
want="$(cat "$requirements" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"

check() {
  # Every pinned library imports, and torch/numpy are Debian's, not PyPI's.
  "$python" - <<'PY'
import sys
import numpy, torch, torchvision
for mod in (torch, numpy, torchvision):
    if not mod.__file__.startswith("/usr/lib/python3/dist-packages/"):
        sys.exit(f"interop-venv: {mod.__name__} {mod.__version__} comes from {mod.__file__}, not Debian's python3 packages")
import accelerate, peft, safetensors, timm, tokenizers, transformers  # noqa: F401
from transformers import LlamaForCausalLM  # noqa: F401 (imports torch-dependent code)
print(f"interop-venv: torch {torch.__version__} (Debian), numpy {numpy.__version__}, transformers "
      f"{transformers.__version__}, timm {timm.__version__}, peft {peft.__version__}", file=sys.stderr)
PY
}

# The stamp is written only after check() passed, so a match needs no re-check
# (importing torch + transformers costs seconds on every test run).
if [[ -x "$python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "interop-venv: reusing $venv (pins unchanged)" >&2
  echo "$python"
  exit 0
fi

echo "interop-venv: building $venv from $requirements" >&2
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps --only-binary=:all: \
  -r "$requirements" >&2
check
echo "$want" > "$stamp"
echo "$python"
