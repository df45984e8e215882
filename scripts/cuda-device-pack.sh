#!/usr/bin/env bash
# Packs what the GPU checks need into one folder that travels to a machine with a GPU but
# none of bivouac's Debian packages (the `device` machines of docs/cuda.md): the built
# binary, libbivouac, the plugins, the cuda tests, the bench tools, the shared libraries
# they need beyond the C and C++ runtimes, and the datasets the checks read.
#   scripts/cuda-device-pack.sh [BUILD_DIR] [PACK_DIR]      (defaults: build .devpack)
# Then, there: scripts/cuda-device-check.sh PACK_DIR OUT_DIR
set -euo pipefail
build=${1:-build}
pack=${2:-.devpack}
data=${BIVOUAC_DATA_DIR:-../shared/data}
[ -f "$build/plugins/compute_cuda.so" ] ||
    { echo "no $build/plugins/compute_cuda.so: build with the CUDA toolkit first" >&2; exit 1; }
rm -rf "$pack"
mkdir -p "$pack/bin/plugins" "$pack/lib" "$pack/tests" "$pack/tools" "$pack/data"
cp "$build/bivouac" "$pack/bin/"
cp "$build"/plugins/*.so "$pack/bin/plugins/"
cp -P "$build"/core/libbivouac.so* "$pack/lib/"
cp "$build"/plugins/compute/cuda/test_compute_cuda "$build"/plugins/compute/cuda/test_gradcheck_cuda \
    "$pack/tests/"
make -s -C bench BIVOUAC_SRC="$PWD" BIVOUAC_BUILD="$PWD/$build" TOOLS="$PWD/$pack/tools" \
    "$PWD/$pack/tools/spmm" "$PWD/$pack/tools/graph_export"
# Every library the binaries load from this machine's system, except the C and C++
# runtimes and CUDA's own (the GPU machine has newer ones of each).
skip='/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|ld-linux-x86-64)\.so'
ldd "$pack/bin/bivouac" "$pack"/bin/plugins/*.so "$pack"/tests/* "$pack"/tools/* 2>/dev/null |
    awk '/=> \// {print $3}' | sort -u | grep -Ev "$skip" | grep -v "/$build/" |
    while read -r lib; do cp -L "$lib" "$pack/lib/"; done
for d in cora citeseer tinyshakespeare; do cp -r "$data/$d" "$pack/data/"; done
du -sh "$pack"
