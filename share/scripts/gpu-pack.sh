#!/usr/bin/env bash
# Packs what `gpu-check.sh --lease` runs into one archive for a GPU machine
# that has CUDA, cuDNN, NCCL and PyTorch but none of Debian's libraries (no
# Open MPI, HDF5, OpenBLAS, oneDNN, Kokkos, SentencePiece):
#
#   bash share/scripts/gpu-pack.sh [--measure] BUILD_DIR OUT.tar.xz
#
# The archive mirrors the build tree's layout for the files the lease uses
# (bin/ftrain, libftrain_cuda.so, lib/ftrain/plugins/, tests/gpu/gpu_test_*,
# tests/bench/bench_cuda_attention), so every script that takes
# FTRAIN_BUILD_DIR runs from the unpacked directory unchanged. Beside them:
# deps/lib (every Debian library those files load, found with ldd), deps/mpi
# (Open MPI's launcher, daemon, MCA components and help files, relocated
# through OPAL_PREFIX/PMIX_PREFIX) and env.sh, which on the GPU machine sets
# PATH and LD_LIBRARY_PATH, finds the machine's own CUDA libraries (toolkit or
# PyTorch's nvidia-* wheels) and checks that nothing is missing:
#
#   mkdir -p /tmp/ftp && tar xf OUT.tar.xz -C /tmp/ftp && source /tmp/ftp/env.sh
#   FTRAIN_BUILD_DIR=/tmp/ftp bash share/scripts/gpu-check.sh --lease
#
# Not packed, because the GPU machine must provide its own matching its
# driver: libcuda, cudart (linked statically anyway), cuBLAS(Lt), cuDNN,
# NCCL, NVRTC; nor glibc and the C++ runtime, whose versions env.sh checks.
# Binaries are stripped. The archive is refused over FTRAIN_GPU_PACK_LIMIT_MIB
# (40: the device tool carries 64 MiB with the checkout, which needs ~20).
# --measure writes the archive, prints its size and what is in it, and checks
# every library closure, which is what `gpu-check.sh --lease --dry-run` does
# in CI.
set -euo pipefail
die() { echo "gpu-pack: $*" >&2; exit 1; }

measure=0
if [[ "${1:-}" == "--measure" ]]; then measure=1; shift; fi
[[ $# -eq 2 ]] || { echo "usage: gpu-pack.sh [--measure] BUILD_DIR OUT.tar.xz" >&2; exit 2; }
build=$(realpath "$1")
out=$(realpath -m "$2")
limit_mib=${FTRAIN_GPU_PACK_LIMIT_MIB:-40}
[[ -f "$build/CMakeCache.txt" ]] || die "$build is not a CMake build tree"

# What the lease runs, as paths relative to the build tree. A missing one is
# an error: a pack without it would fail on the GPU, where time is scarce.
lease_files=(
  bin/ftrain bin/ftrain-prep
  libftrain_cuda.so
  tests/gpu/gpu_test_cuda_ops tests/gpu/gpu_test_cuda_attention tests/gpu/gpu_test_cuda_fp8
  tests/gpu/gpu_test_device_comm
  tests/bench/bench_cuda_attention
)
missing=()
for f in "${lease_files[@]}"; do [[ -e "$build/$f" ]] || missing+=("$f"); done
((${#missing[@]} == 0)) || die "not built in $build: ${missing[*]} (cmake --build $build --target ftrain_exe ftrain_prep ftrain_cuda gpu_test_cuda_ops gpu_test_cuda_attention gpu_test_cuda_fp8 gpu_test_device_comm bench_cuda_attention ftrain_plugin_llama ftrain_plugin_vit)"
ls "$build"/lib/ftrain/plugins/*.so > /dev/null 2>&1 || die "no plugins in $build/lib/ftrain/plugins"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
copy_into_stage() {  # RELATIVE_PATH: the file (and, for a library, its soname links) under stage/
  local rel=$1 dir
  dir=$(dirname "$rel")
  mkdir -p "$stage/$dir"
  cp -a "$build/$rel" "$stage/$rel"
}
for f in "${lease_files[@]}"; do copy_into_stage "$f"; done
for f in "$build"/libftrain.so*; do copy_into_stage "$(basename "$f")"; done
for f in "$build"/lib/ftrain/plugins/*.so; do copy_into_stage "lib/ftrain/plugins/$(basename "$f")"; done

# Libraries the GPU machine provides itself: glibc and the C++ runtime...
system_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
# ...and CUDA's, which must match its driver.
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z.-]*|nvJitLink|curand|cufft|cusparse|cusolver|cupti|nvToolsExt|nvidia-ml)\.so'

# Open MPI 4.1 as Debian builds it (what the binaries link): orterun is
# mpirun, orted its daemon; MCA components are loaded at run time, so ldd of
# the binaries does not see them. Fabric components (UCX, OFI, PSM, verbs)
# are left out: the GPU machine is one node, and they would pull rdma-core.
debian_lib=/usr/lib/x86_64-linux-gnu
mpi=$stage/deps/mpi
[[ -x /usr/bin/orterun && -d $debian_lib/openmpi/lib/openmpi3 ]] || die "needs Debian's Open MPI (apt-get install openmpi-bin)"
mkdir -p "$mpi/bin" "$mpi/lib/openmpi3" "$mpi/share" "$mpi/etc" "$mpi/pmix/lib" "$stage/deps/lib"
cp -a /usr/bin/orterun /usr/bin/orted "$mpi/bin/"
ln -s orterun "$mpi/bin/mpirun"
ln -s orterun "$mpi/bin/mpiexec"
cp -a /usr/share/openmpi "$mpi/share/"
cp -a /etc/openmpi "$mpi/etc/"
cp -a $debian_lib/pmix2/lib/pmix "$mpi/pmix/lib/"
cp -a $debian_lib/pmix2/share "$mpi/pmix/"
fabric_re='libuc[pstm]\.so|libfabric|libpsm|libibverbs|librdmacm'
for component in $debian_lib/openmpi/lib/openmpi3/mca_*.so; do
  [[ $(ldd "$component") =~ $fabric_re ]] || cp -a "$component" "$mpi/lib/openmpi3/"
done

is_elf() { [[ "$(head -c4 "$1" | tail -c3)" == ELF ]]; }
# Strip what we built (symbols are most of its size; the lease needs none).
find "$stage" -type f ! -path "$stage/deps/*" | while read -r f; do
  if is_elf "$f"; then strip --strip-unneeded "$f"; fi
done

# The library closure of every packed ELF file: a library that is neither
# packed from the build, the system's nor CUDA's is copied into deps/lib.
# One not found here at all is an error (the GPU machine would not have it
# either).
needed_cuda=" "
not_found=()
while read -r soname path; do
  if [[ $soname =~ $system_re ]]; then continue
  elif [[ $soname =~ $cuda_re ]]; then needed_cuda="$needed_cuda$soname "
  elif [[ $path == not ]]; then not_found+=("$soname")
  elif [[ $path == "$build"/* ]]; then continue
  elif [[ ! -e "$stage/deps/lib/$soname" ]]; then cp -L "$path" "$stage/deps/lib/$soname"
  fi
done < <(find "$stage" -type f | while read -r f; do
           if is_elf "$f"; then ldd "$f" 2>/dev/null || true; fi
         done | awk '/=>/ {print $1, $3}' | sort -u)
((${#not_found[@]} == 0)) || die "libraries not found on this machine (ldd): ${not_found[*]}"
# Copied libraries can need further ones: one more closure pass over deps/lib.
while read -r soname path; do
  if [[ $soname =~ $system_re || $soname =~ $cuda_re || -e "$stage/deps/lib/$soname" ]]; then continue; fi
  [[ $path != not ]] || die "library not found on this machine (ldd): $soname"
  cp -L "$path" "$stage/deps/lib/$soname"
done < <(for f in "$stage"/deps/lib/*; do ldd "$f" 2>/dev/null || true; done | awk '/=>/ {print $1, $3}' | sort -u)

glibc_needed=$({ grep -raoh 'GLIBC_2\.[0-9]*' "$stage" || true; } | sort -uV | tail -n1)
glibcxx_needed=$({ grep -raoh 'GLIBCXX_3\.4\.[0-9]*' "$stage" || true; } | sort -uV | tail -n1)

cat > "$stage/env.sh" <<ENV
# Written by share/scripts/gpu-pack.sh from $build on $(date -u +%FT%TZ).
# Source it with bash on the GPU machine: it sets PATH, LD_LIBRARY_PATH and
# Open MPI's relocation variables, and fails (returns 1) when the machine
# lacks a library the packed files need.
FTRAIN_PACK_GLIBC='${glibc_needed#GLIBC_}'
FTRAIN_PACK_GLIBCXX='${glibcxx_needed}'
FTRAIN_PACK_CUDA_LIBS='${needed_cuda# }'
FTRAIN_PACK_BUILT_AT='$build'
ENV
cat >> "$stage/env.sh" <<'ENV'
(return 0 2>/dev/null) || { echo "env.sh: source it, do not run it" >&2; exit 2; }
FTRAIN_PACK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_fp_fail() { echo "env.sh: ERROR: $*" >&2; return 1; }
_fp_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null); _fp_glibc=${_fp_glibc##* }
if [ -n "$FTRAIN_PACK_GLIBC" ] && [ "$(printf '%s\n' "$FTRAIN_PACK_GLIBC" "$_fp_glibc" | sort -V | head -n1)" != "$FTRAIN_PACK_GLIBC" ]; then
  _fp_fail "glibc $_fp_glibc here, the packed binaries need $FTRAIN_PACK_GLIBC" || return 1
fi
# CUDA's libraries: the toolkit's, then PyTorch's nvidia-* wheels, then ld.so's cache.
_fp_dirs="${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib"
_fp_dirs="$_fp_dirs $(python3 -c 'import glob, nvidia; print(*sorted(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib") + glob.glob(p + "/*/*/lib")))' 2>/dev/null)"
_fp_path=""
_fp_missing=""
for _fp_lib in $FTRAIN_PACK_CUDA_LIBS; do
  case $_fp_lib in libcuda.so*|libnvidia-ml.so*) continue ;; esac  # the driver's, always in ld.so's cache
  _fp_at=""
  for _fp_d in $_fp_dirs; do if [ -e "$_fp_d/$_fp_lib" ]; then _fp_at=$_fp_d; break; fi; done
  if [ -n "$_fp_at" ]; then
    case ":$_fp_path:" in *":$_fp_at:"*) ;; *) _fp_path="$_fp_path:$_fp_at" ;; esac
  elif ! /sbin/ldconfig -p 2>/dev/null | grep -q " $_fp_lib "; then
    _fp_missing="$_fp_missing $_fp_lib"
  fi
done
[ -z "$_fp_missing" ] || { _fp_fail "not on this machine:$_fp_missing (looked in $_fp_dirs)"; return 1; }
_fp_mpi=$FTRAIN_PACK_ROOT/deps/mpi
export OPAL_PREFIX=$_fp_mpi OPAL_EXEC_PREFIX=$_fp_mpi OPAL_BINDIR=$_fp_mpi/bin OPAL_LIBDIR=$FTRAIN_PACK_ROOT/deps/lib \
  OPAL_PKGLIBDIR=$_fp_mpi/lib/openmpi3 OPAL_DATAROOTDIR=$_fp_mpi/share OPAL_DATADIR=$_fp_mpi/share \
  OPAL_PKGDATADIR=$_fp_mpi/share/openmpi OPAL_SYSCONFDIR=$_fp_mpi/etc/openmpi
export PMIX_PREFIX=$_fp_mpi/pmix PMIX_EXEC_PREFIX=$_fp_mpi/pmix PMIX_LIBDIR=$_fp_mpi/pmix/lib \
  PMIX_PKGLIBDIR=$_fp_mpi/pmix/lib/pmix PMIX_DATAROOTDIR=$_fp_mpi/pmix/share PMIX_DATADIR=$_fp_mpi/pmix/share \
  PMIX_PKGDATADIR=$_fp_mpi/pmix/share/pmix PMIX_SYSCONFDIR=$_fp_mpi/pmix/share \
  PMIX_MCA_mca_base_component_path=$_fp_mpi/pmix/lib/pmix
export HWLOC_PLUGINS_PATH=$_fp_mpi/lib/hwloc
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH=$_fp_mpi/bin:$FTRAIN_PACK_ROOT/bin:$PATH
export LD_LIBRARY_PATH=$FTRAIN_PACK_ROOT:$FTRAIN_PACK_ROOT/deps/lib$_fp_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FTRAIN_PLUGIN_PATH=$FTRAIN_PACK_ROOT/lib/ftrain/plugins
export FTRAIN_BUILD_DIR=$FTRAIN_PACK_ROOT
# Tests carry the build tree's absolute paths (a plugin directory, say):
# where that path is free here, it leads to the pack.
if [ ! -e "$FTRAIN_PACK_BUILT_AT" ] && mkdir -p "$(dirname "$FTRAIN_PACK_BUILT_AT")" 2>/dev/null; then
  ln -s "$FTRAIN_PACK_ROOT" "$FTRAIN_PACK_BUILT_AT" && echo "env.sh: linked $FTRAIN_PACK_BUILT_AT -> $FTRAIN_PACK_ROOT"
fi
# Every packed ELF file's libraries, resolved here: none may be missing.
_fp_unresolved=$(find "$FTRAIN_PACK_ROOT" -type f | while read -r f; do
  [ "$(head -c4 "$f" | tail -c3)" = ELF ] || continue
  ldd "$f" 2>/dev/null | awk -v f="${f#$FTRAIN_PACK_ROOT/}" '$3 == "not" {print f ": " $1}'
done)
[ -z "$_fp_unresolved" ] || { _fp_fail "unresolved libraries:"$'\n'"$_fp_unresolved"; return 1; }
echo "env.sh: ftrain pack at $FTRAIN_PACK_ROOT ready (CUDA libraries from:${_fp_path//:/ })"
unset -v _fp_glibc _fp_dirs _fp_path _fp_missing _fp_lib _fp_at _fp_d _fp_mpi _fp_unresolved
unset -f _fp_fail
ENV

mkdir -p "$(dirname "$out")"
XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$stage" -cJf "$out" .
size=$(stat -c %s "$out")
size_mib=$(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}')
echo "gpu-pack: $out: $size_mib MiB ($size bytes; limit $limit_mib MiB)"
echo "gpu-pack: CUDA libraries the GPU machine must provide:$needed_cuda"
echo "gpu-pack: Debian libraries packed: $(ls "$stage/deps/lib" | wc -l); Open MPI components: $(ls "$mpi/lib/openmpi3" | wc -l); newest glibc symbol ${glibc_needed:-none}, libstdc++ ${glibcxx_needed:-none}"
if ((measure)); then
  echo "gpu-pack: largest packed files (unpacked bytes):"
  # sed, not head: head leaves while sort may still write, and with pipefail
  # that SIGPIPE turned a good pack into exit 1 now and then.
  (cd "$stage" && find . -type f -printf '%s %p\n' | sort -rn | sed -n '1,8s/^/  /p')
fi
if ((size > limit_mib * 1048576)); then
  rm -f "$out"
  die "$size_mib MiB is over the $limit_mib MiB limit: refused"
fi
