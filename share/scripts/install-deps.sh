#!/usr/bin/env bash
# Installs ftrain's build and test dependencies from Debian 12 packages.
# Why a script: the README's two commands and CI must install exactly the same
# set, and a fresh machine has none of it. Idempotent; needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libtrilinos-kokkos-dev
  libopenblas-dev libdnnl-dev
  ocl-icd-opencl-dev  # Debian's dnnl-config.cmake requires OpenCL (its GPU runtime is OCL); only Recommends
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  libsentencepiece-dev sentencepiece
  libpcre2-dev  # ftrain-prep's Llama 3 tokenizer: the pre-tokenizer regex's Unicode classes
  python3 python3-numpy python3-h5py python3-matplotlib
  # The interop tests' environment (share/scripts/interop-venv.sh): a venv over
  # Debian's PyTorch 1.13 and the Python packages the pinned HF libraries need.
  python3-venv python3-torch python3-torchvision
  python3-packaging python3-yaml python3-psutil python3-requests python3-typing-extensions
  python3-jinja2  # PEFT's save_pretrained writes a model card with it; transformers' apply_chat_template renders with it (interop_chat_templates)
  # The slurm tests (tests/slurm/) run jobs/slurm/ under a real SLURM started
  # on this machine: the daemons, the clients and munge; slurmd brings the
  # mpi/pmix and mpi/pmi2 plugins (slurm-wlm-basic-plugins) srun needs.
  slurmd slurmctld slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
