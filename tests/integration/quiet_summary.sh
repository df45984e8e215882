#!/usr/bin/env bash
# --quiet hides only the progress line: a graph (GCN) and a sequence (transformer) run
# both still print their one-line summary on stdout, and nothing on stderr. (The
# transformer's summary used to disappear with --quiet.) Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
num='[0-9]+(\.[0-9]+)?'

# summary_is REGEX: stdout is exactly one line matching REGEX (anchored), stderr empty.
summary_is() {
    : >"$why"
    local s=0
    if [[ $rc != 0 ]]; then
        echo "exit status $rc, expected 0" >>"$why"
        s=1
    fi
    stderr_is "" || s=1
    if [[ $(wc -l <"$tmp/stdout") != 1 ]] || ! grep -Eqx -- "$1" "$tmp/stdout"; then
        { echo "stdout should be one line matching ^$1\$, got:"; sed 's/^/  | /' "$tmp/stdout"; } \
            >>"$why"
        s=1
    fi
    return $s
}

t "GCN run --quiet prints the summary line"
out="$tmp/gcn"
capture "$B" run "$EXP/base.yaml" --out "$out" --quiet
s=0
summary_is "gcn on cora: test accuracy $num \(best val $num at epoch [0-9]+\), 2 epochs in $num s; reached 2 epochs -> $out/result.json" || s=1
report $s "$B run $EXP/base.yaml --out $out --quiet"

t "transformer run --quiet prints the summary line"
out="$tmp/tf"
capture "$B" run "$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml" --out "$out" --quiet \
    -s train.steps=10
s=0
summary_is "transformer on tinyshakespeare: val loss $num \(train $num\) after 10 steps, $num tokens/s, $num s -> $out/result.json" || s=1
report $s "$B run tests/data/transformer/tiny.yaml --out $out --quiet -s train.steps=10"

finish
