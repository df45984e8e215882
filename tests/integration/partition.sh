#!/usr/bin/env bash
# `bivouac partition`: the quickstart graph split both ways, the same split (fingerprint)
# from two processes, per-part counts that add up to the graph, and usage errors with
# exit 2. Needs no data. Environment: BIVOUAC (the built executable), BIVOUAC_SOURCE_DIR.
set -euo pipefail
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
B=$BIVOUAC
exp="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"

a="$("$B" partition "$exp" --parts 3 --seed 7)"
b="$("$B" partition "$exp" --parts 3 --seed 7)"
echo "$a"
check "two processes print the same split" "$(grep fingerprint <<<"$a")" \
    "$(grep fingerprint <<<"$b")"
check "header" "$(head -1 <<<"$a" | sed 's/ in [0-9.]* s$//')" \
    "communities: 1000 vertices, 2000 edges, metis into 3 parts (seed 7)"
check "three parts listed" "$(awk '$1 ~ /^[0-9]+$/' <<<"$a" | wc -l)" 3
check "the parts own every vertex" "$(awk '$1 ~ /^[0-9]+$/ {s += $2} END {print s}' <<<"$a")" 1000
check "the parts hold every in-edge" "$(awk '$1 ~ /^[0-9]+$/ {s += $3} END {print s}' <<<"$a")" 4000
check "what is sent is what is received" \
    "$(awk '$1 ~ /^[0-9]+$/ {g += $4; s += $5} END {print g == s}' <<<"$a")" 1

r="$("$B" partition "$exp" --parts 4 --method range)"
check "range: contiguous equal parts" "$(awk '$1 ~ /^[0-9]+$/ {print $2}' <<<"$r" | paste -sd,)" \
    "250,250,250,250"
one="$("$B" partition "$exp" --parts 1)"
check "one part cuts nothing" "$(grep '^edge cut' <<<"$one")" "edge cut: 0 of 2000 edges (0.0 %)"

expect_usage() { # what, message, args...
    local what="$1" want="$2" rc=0 out
    shift 2
    out="$("$B" "$@" 2>&1 >/dev/null)" || rc=$?
    check "$what: exit 2" "$rc" 2
    check "$what: message" "$out" "$want"
}
expect_usage "more parts than vertices" \
    "bivouac: error: cannot split 1000 vertices into 1001 parts: every graph server needs a vertex (use at most 1000)" \
    partition "$exp" --parts 1001
expect_usage "no --parts" "bivouac: error: partition needs --parts G" partition "$exp"
expect_usage "--parts 0" "bivouac: error: --parts needs an integer in [1, 2147483647], got '0'" \
    partition "$exp" --parts 0
expect_usage "unknown method" "bivouac: error: --method is metis or range, got 'random'" \
    partition "$exp" --parts 2 --method random
expect_usage "a sequence model" \
    "bivouac: error: $BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml: model transformer is not a graph model: there is no graph to partition" \
    partition "$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml" --parts 2
finish
