#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz_config, fuzz_graph, fuzz_graph_cache, fuzz_checkpoint,
# fuzz_policy, fuzz_role_frame, fuzz_graph_part) with clang -fsanitize=fuzzer,address,undefined. The core sources they need
# (runtime/, config/, policy/, data/, and the graph engine's task_hdr.c and graph_view.c) are compiled once into an archive with the same
# sanitizers; the checkpoint reader is compiled straight from the plugin's folder.
# Usage: tests/fuzz/build.sh [OUT_DIR]   (default: build-fuzz/ at the repository root)
# Not part of CMake or CI: see tests/fuzz/README.md.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/build-fuzz}"
CC="${CC:-clang}"
mkdir -p "$out/obj"

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cflags="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer $san
  -DBIVOUAC_VERSION=\"fuzz\" -DBIVOUAC_BUILD_PLUGIN_DIR=\"\" -DBIVOUAC_PLUGIN_DIR_REL=\"\"
  -DBIVOUAC_LIBDIR_REL=\"lib\""
incs="-I$root/core/include"
for d in runtime config policy data engine/graph; do incs="$incs -I$root/core/src/$d"; done
incs="$incs -I$root/plugins/resilience/checkpoint $(pkg-config --cflags yaml-0.1 lua5.4 libffi)"
libs="$(pkg-config --libs yaml-0.1 lua5.4 libffi) -lpthread -lm"

# The core archive: instrumented for coverage (fuzzer-no-link) but without libFuzzer's main.
objs=()
for src in "$root"/core/src/{runtime,config,policy,data}/*.c \
           "$root"/core/src/engine/graph/task_hdr.c \
           "$root"/core/src/engine/graph/graph_view.c \
           "$root"/plugins/resilience/checkpoint/checkpoint_file.c; do
  o="$out/obj/$(basename "$(dirname "$src")")_$(basename "${src%.c}").o"
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ "$0" -nt "$o" ]; then
    echo "CC $src"
    # shellcheck disable=SC2086
    "$CC" $cflags -fsanitize=fuzzer-no-link $incs -c "$src" -o "$o"
  fi
  objs+=("$o")
done
rm -f "$out/libbvfuzz.a"
ar rcs "$out/libbvfuzz.a" "${objs[@]}"

for t in "$root"/tests/fuzz/fuzz_*.c; do
  name="$(basename "${t%.c}")"
  echo "LINK $name"
  # shellcheck disable=SC2086
  "$CC" $cflags -fsanitize=fuzzer $incs "$t" "$out/libbvfuzz.a" $libs -o "$out/$name"
done
echo "fuzz targets in $out"
