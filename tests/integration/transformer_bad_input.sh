#!/usr/bin/env bash
# Bad input to a sequence model is a positioned config error (file:line:col, exit 2) found
# before anything trains, by `check` and by `run`: an empty corpus, a corpus that is not
# UTF-8, a block longer than a split of the corpus, a head count that does not divide the
# width. Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -uo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
data="$BIVOUAC_SOURCE_DIR/tests/data/transformer"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-tf-bad.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect YAML LINE:COL PATTERN
expect() {
    local yaml="$data/$1.yaml" where=$2 pattern=$3
    for cmd in check run; do
        local args=("$cmd" "$yaml")
        [ "$cmd" = run ] && args+=(--out "$tmp/$1" --quiet)
        "$BIVOUAC" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
        local code=$?
        if [ $code -ne 2 ]; then
            echo "FAIL: $cmd $1: exit $code, want 2" >&2; cat "$tmp/err" >&2; failed=1
        elif ! grep -q "^$yaml:$where: error: .*$pattern" "$tmp/err"; then
            echo "FAIL: $cmd $1: want '$yaml:$where: error: ...$pattern', got:" >&2
            cat "$tmp/err" >&2; failed=1
        elif [ "$cmd" = run ] && [ -e "$tmp/$1/metrics.jsonl" ]; then
            echo "FAIL: run $1 started training" >&2; failed=1
        else
            echo "ok: $cmd $1: $(head -1 "$tmp/err")"
        fi
    done
}

expect empty_corpus 2:17 "is empty"
expect not_utf8 2:17 "not UTF-8: invalid byte 0xff at offset 6 (line 1)"
expect block_too_long 6:10 "'block' (64) must be smaller than both splits"
expect bad_heads 4:10 "'heads' (3) must divide 'width' (32)"
exit $failed
