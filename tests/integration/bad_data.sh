#!/usr/bin/env bash
# Damaged copies of cora (made in a temporary directory, never in the repository): the run
# names the file, the line where there is one, and what is wrong; exit 2; no output
# directory and no cache entry. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
cora="$BIVOUAC_DATA_DIR/cora"
base="$EXP/base.yaml"

# The line numbers and sizes below are those of this exact cora.
(cd "$cora" && sha256sum --quiet -c - <<'EOF') ||
a6cafe6abd12b83df937f643562bbc019baa15938937937b63dd59e419e7030c  edges.tsv
fd743a892b6587375739c4306c431be56615d20728d01e7aa7628f0cf8646520  features.svm
219accbab317ad23a908027322376c34d741cba04e6704c01b05614cea6d9b6d  split.tsv
EOF
    { echo "FAIL: $cora is not the cora these tests were written for"; exit 1; }

# fresh_cora: a writable copy at $data/cora, looked up through BIVOUAC_DATA_DIR=$data.
data="$tmp/data"
d="$data/cora"
fresh_cora() {
    rm -rf "$data"
    mkdir -p "$data"
    cp -r "$cora" "$d"
    chmod -R u+w "$d"
}
drop_sizes() { sed -i '/^bytes:$/,/^[^ ]/{/^bytes:$/d;/^  /d}' "$d/meta.yaml"; }
drop_sums() { sed -i '/^sha256:$/,/^[^ ]/{/^sha256:$/d;/^  /d}' "$d/meta.yaml"; }
sum_of() { sha256sum <"$1" | cut -d' ' -f1; }
# reseal FILE: meta.yaml's size and sha256 of FILE become the file's own, as an operator
# who changed the file on purpose would set them.
reseal() {
    local size sum
    size=$(stat -c %s "$d/$1")
    sum=$(sum_of "$d/$1")
    sed -i -e "s/^  $1: [0-9]*\$/  $1: $size/" -e "s/^  $1: \"[0-9a-f]*\"\$/  $1: \"$sum\"/" \
        "$d/meta.yaml"
}
# The message for a file whose sum is not meta.yaml's.
mismatch() {
    echo "bivouac: error: $d/$1: sha256 mismatch: meta.yaml says $2, the file has" \
        "$(sum_of "$d/$1") (the file is corrupt or was changed: restore it, or update" \
        "meta.yaml if the change is meant)"
}
features_sum=fd743a892b6587375739c4306c431be56615d20728d01e7aa7628f0cf8646520
export BIVOUAC_DATA_DIR="$data"

t "the undamaged copy trains (the damage below is all that differs)"
fresh_cora
expect_exit 0 "" "$B" run "$base" --out "$tmp/good" --quiet
rm -rf "$tmp/good" "$BIVOUAC_CACHE_DIR"

t "features.svm shorter than meta.yaml's size"
fresh_cora
truncate -s 300000 "$d/features.svm"
expect_run_fail 2 \
    "bivouac: error: $d/features.svm: 300000 bytes, but meta.yaml says 316362 (truncated or modified?)" \
    "$base"

t "no sizes or sums in meta.yaml, features.svm cut in the middle of line 2561"
fresh_cora
drop_sizes
drop_sums
truncate -s 300000 "$d/features.svm" # ends "... 388:1 4"
expect_run_fail 2 \
    "bivouac: error: $d/features.svm: 2561 lines, but meta.yaml says nodes: 2708 (one line per node)" \
    "$base"

t "no sizes or sums in meta.yaml, features.svm cut after line 2560"
fresh_cora
drop_sizes
drop_sums
head -n 2560 "$cora/features.svm" >"$d/features.svm"
expect_run_fail 2 \
    "bivouac: error: $d/features.svm: 2560 lines, but meta.yaml says nodes: 2708 (one line per node)" \
    "$base"

t "no sizes in meta.yaml, features.svm cut after line 2560: the sum catches it"
fresh_cora
drop_sizes
head -n 2560 "$cora/features.svm" >"$d/features.svm"
expect_run_fail 2 "$(mismatch features.svm $features_sum)" "$base"

t "an edge names node 2708 (meta.yaml's size and sum adjusted to match)"
fresh_cora
printf '2708\t0\n' >>"$d/edges.tsv"
reseal edges.tsv
grep -q '^  edges.tsv: 48443$' "$d/meta.yaml" # reseal did its job
expect_run_fail 2 "bivouac: error: $d/edges.tsv:5279: node 2708 out of range (2708 nodes)" "$base"

t "an edge names node 2708 (no sizes or sums in meta.yaml)"
fresh_cora
drop_sizes
drop_sums
printf '2708\t0\n' >>"$d/edges.tsv"
expect_run_fail 2 "bivouac: error: $d/edges.tsv:5279: node 2708 out of range (2708 nodes)" "$base"

t "meta.yaml without 'nodes'"
fresh_cora
sed -i '/^nodes:/d' "$d/meta.yaml"
expect_run_fail 2 "bivouac: error: $d/meta.yaml: missing 'nodes'" "$base"

t "split.tsv missing"
fresh_cora
rm "$d/split.tsv"
expect_run_fail 2 "bivouac: error: $d/split.tsv: No such file or directory" "$base"

t "a cached dataset is not used once its features.svm is cut (no sizes in meta.yaml; the sum catches it)"
fresh_cora
drop_sizes
expect_exit 0 "" "$B" run "$base" --out "$tmp/cached" --quiet # writes the cache
rm -rf "$tmp/cached"
if [[ -z $(cache_listing) ]]; then
    failed=$((failed + 1))
    echo "FAIL - the good run wrote no cache entry in $BIVOUAC_CACHE_DIR: the check below proves nothing"
fi
truncate -s 300000 "$d/features.svm"
expect_run_fail 2 "$(mismatch features.svm $features_sum)" "$base"

# --- issue 18: datasets are verified (docs/limits.md, "Datasets") ---------------------

t "features.svm changed in one byte, same size (node 0's label 3 became 5): sha256 mismatch"
fresh_cora
printf 5 | dd of="$d/features.svm" bs=1 seek=0 conv=notrunc status=none
expect_run_fail 2 "$(mismatch features.svm $features_sum)" "$base"

t "the same change after a cached run, with the mtime put back (touch -r): verified again"
fresh_cora
expect_exit 0 "" "$B" run "$base" --out "$tmp/cached" --quiet # writes the cache
rm -rf "$tmp/cached"
touch -r "$d/features.svm" "$tmp/stamp"
sleep 1 # a ctime in another second, even on a coarse clock
printf 5 | dd of="$d/features.svm" bs=1 seek=0 conv=notrunc status=none
touch -r "$tmp/stamp" "$d/features.svm"
[[ $(stat -c %s.%Y "$d/features.svm") == "316362.$(stat -c %Y "$tmp/stamp")" ]]
expect_run_fail 2 "$(mismatch features.svm $features_sum)" "$base"
rm -rf "$BIVOUAC_CACHE_DIR"

# In a process limited to 300 MB of address space: the 2e9-node arrays (the old loader
# reached 9.7 GB resident before failing) cannot even start, so only the count check can
# give this message; an allocation failure would read "out of memory" with exit 1.
# (Not under AddressSanitizer, which reserves terabytes of shadow address space.) OpenBLAS
# starts a thread per core at load time, each reserving a malloc arena, and spins forever
# when that fails: one BLAS thread and one arena keep the limit about the loader on a
# machine of any size, and `timeout` turns a hang into a failure.
small="$tmp/small-bivouac"
if ldd "$B" | grep libasan >/dev/null; then  # not -q: with pipefail, ldd could die of SIGPIPE
    small=$B
else
    cat >"$small" <<EOF
#!/bin/sh
ulimit -v 300000
export OPENBLAS_NUM_THREADS=1 MALLOC_ARENA_MAX=1
exec timeout 60 "$B" "\$@"
EOF
    chmod +x "$small"
fi

t "meta.yaml says nodes: 2000000000 over 2708 lines: refused before allocating (ulimit -v)"
fresh_cora
sed -i 's/^nodes: 2708$/nodes: 2000000000/' "$d/meta.yaml"
BIVOUAC=$small expect_run_fail 2 \
    "bivouac: error: $d/features.svm: 2708 lines, but meta.yaml says nodes: 2000000000 (one line per node)" \
    "$base"

t "meta.yaml says undirected_edges: 2000000000 over 5278 lines (ulimit -v)"
fresh_cora
sed -i 's/^undirected_edges: 5278$/undirected_edges: 2000000000/' "$d/meta.yaml"
BIVOUAC=$small expect_run_fail 2 \
    "bivouac: error: $d/edges.tsv: 5278 lines, but meta.yaml says undirected_edges: 2000000000 (one line per edge)" \
    "$base"

t "meta.yaml says features: 1000000000000 (10.8 PB of dense features) (ulimit -v)"
fresh_cora
sed -i 's/^features: 1433$/features: 1000000000000/' "$d/meta.yaml"
stderr_filter="s/this machine's [0-9.]+ GB/this machine's N GB/"
BIVOUAC=$small expect_run_fail 2 \
    "bivouac: error: $d/meta.yaml: nodes: 2708 x features: 1000000000000 is 10832000.0 GB of dense features, more than this machine's N GB of memory" \
    "$base"
stderr_filter=""

t "split.tsv marks no vertex 'train' (size and sum adjusted): refused"
fresh_cora
sed -i 's/^train$/none/' "$d/split.tsv"
reseal split.tsv
expect_run_fail 2 \
    "bivouac: error: dataset cora has no training vertices (split.tsv marks none 'train')" "$base"

t "split.tsv marks no vertex 'val' (size and sum adjusted): a warning, and the run trains"
fresh_cora
sed -i 's/^val$/none/' "$d/split.tsv"
reseal split.tsv
expect_exit 0 \
    "bivouac: warning: dataset cora has no validation vertices (split.tsv marks none 'val'): validation loss and accuracy read 0, so early stopping and best-on-validation selection have nothing to go on" \
    "$B" run "$base" --out "$tmp/noval" --quiet
rm -rf "$tmp/noval" "$BIVOUAC_CACHE_DIR"

t "a synthetic powerlaw graph of 5 nodes would have no training vertex: refused"
cat >"$tmp/powerlaw5.yaml" <<'EOF'
name: bad-powerlaw
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {synthetic: powerlaw, nodes: 5, edges: 4}
train: {epochs: 2, lr: 0.01, seed: 42}
EOF
expect_run_fail 2 \
    "bivouac: error: powerlaw: nodes must be at least 10, not 5 (the 10% training split would be empty)" \
    "$tmp/powerlaw5.yaml"

finish
