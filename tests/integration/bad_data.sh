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

t "no sizes in meta.yaml, features.svm cut in the middle of line 2561"
fresh_cora
drop_sizes
truncate -s 300000 "$d/features.svm" # ends "... 388:1 4"
expect_run_fail 2 "bivouac: error: $d/features.svm:2561: malformed feature '4'" "$base"

t "no sizes in meta.yaml, features.svm cut after line 2560"
fresh_cora
drop_sizes
head -n 2560 "$cora/features.svm" >"$d/features.svm"
expect_run_fail 2 "bivouac: error: $d/features.svm: 2560 lines, expected 2708 (one per node)" \
    "$base"

t "an edge names node 2708 (meta.yaml's size adjusted to match)"
fresh_cora
printf '2708\t0\n' >>"$d/edges.tsv"
sed -i 's/^  edges.tsv: 48436$/  edges.tsv: 48443/' "$d/meta.yaml"
expect_run_fail 2 "bivouac: error: $d/edges.tsv:5279: node 2708 out of range (2708 nodes)" "$base"

t "an edge names node 2708 (no sizes in meta.yaml)"
fresh_cora
drop_sizes
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

t "a cached dataset is not used once its features.svm is cut (no sizes in meta.yaml)"
fresh_cora
drop_sizes
expect_exit 0 "" "$B" run "$base" --out "$tmp/cached" --quiet # writes the cache
rm -rf "$tmp/cached"
if [[ -z $(cache_listing) ]]; then
    failed=$((failed + 1))
    echo "FAIL - the good run wrote no cache entry in $BIVOUAC_CACHE_DIR: the check below proves nothing"
fi
truncate -s 300000 "$d/features.svm"
expect_run_fail 2 "bivouac: error: $d/features.svm:2561: malformed feature '4'" "$base"

finish
