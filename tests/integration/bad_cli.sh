#!/usr/bin/env bash
# Operator mistakes and hostile values on the command line: every numeric flag is range
# checked (exit 2, the flag, its range and the text given; never a cast out of range),
# `sample` names the prompt character a model cannot encode, and `plugins --json` stays
# valid JSON whatever bytes a plugin's file name holds. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
f="$EXP/base.yaml"
seed_range="[0, 9007199254740992]"

# A short transformer run gives `sample` a real checkpoint, so that a bad flag is caught
# before anything is sized from it (--tokens 2^62 overflowed the token buffer).
ck="$tmp/tf"
"$B" run "$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml" --out "$ck" --quiet \
    -s train.steps=10 >/dev/null

t "sample --tokens 2^62 (overflowed the buffer size): exit 2 with the range"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '4611686018427387904'" \
    "$B" sample --checkpoint "$ck" --tokens 4611686018427387904
t "sample --tokens 1e19 (generated nothing, exit 0): exit 2"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '1e19'" \
    "$B" sample --checkpoint "$ck" --tokens 1e19
t "sample --tokens above the range"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '1000001'" \
    "$B" sample --checkpoint "$ck" --tokens 1000001
t "sample --tokens 0"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '0'" \
    "$B" sample --checkpoint "$ck" --tokens 0
t "sample --tokens with trailing junk"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '12x'" \
    "$B" sample --checkpoint "$ck" --tokens 12x
t "sample --tokens in hex"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got '0x10'" \
    "$B" sample --checkpoint "$ck" --tokens 0x10
t "sample --tokens with leading space"
expect_fail 2 "bivouac: error: --tokens needs an integer in [1, 1000000], got ' 5'" \
    "$B" sample --checkpoint "$ck" --tokens " 5"
t "sample --temperature nan"
expect_fail 2 "bivouac: error: --temperature needs a number in [0, 100], got 'nan'" \
    "$B" sample --checkpoint "$ck" --temperature nan
t "sample --temperature inf"
expect_fail 2 "bivouac: error: --temperature needs a number in [0, 100], got 'inf'" \
    "$B" sample --checkpoint "$ck" --temperature inf
t "sample --temperature 1e400 (overflows a double)"
expect_fail 2 "bivouac: error: --temperature needs a number in [0, 100], got '1e400'" \
    "$B" sample --checkpoint "$ck" --temperature 1e400
t "sample --temperature negative"
expect_fail 2 "bivouac: error: --temperature needs a number in [0, 100], got '-0.5'" \
    "$B" sample --checkpoint "$ck" --temperature -0.5
t "sample --top-k 1e19"
expect_fail 2 "bivouac: error: --top-k needs an integer in [0, 1000000], got '1e19'" \
    "$B" sample --checkpoint "$ck" --top-k 1e19
t "sample --top-k -1"
expect_fail 2 "bivouac: error: --top-k needs an integer in [0, 1000000], got '-1'" \
    "$B" sample --checkpoint "$ck" --top-k -1
t "sample --seed 2^64"
expect_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '18446744073709551616'" \
    "$B" sample --checkpoint "$ck" --seed 18446744073709551616
t "sample --seed 1.5"
expect_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '1.5'" \
    "$B" sample --checkpoint "$ck" --seed 1.5
t "sample at the ends of the ranges works"
: >"$why"
capture "$B" sample --checkpoint "$ck" --prompt "ROMEO:" --tokens 1 --temperature 100 \
    --top-k 1000000 --seed 9007199254740992
s=0
if [[ $rc != 0 || -s $tmp/stderr || $(head -c 6 "$tmp/stdout") != "ROMEO:" ]]; then
    { echo "exit $rc, stdout:"; cat "$tmp/stdout"; echo "stderr:"; cat "$tmp/stderr"; } >>"$why"
    s=1
fi
report $s "$B sample --checkpoint $ck --tokens 1 --temperature 100 --top-k 1000000 ..."

t "run --seed -1"
expect_run_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '-1'" "$f" --seed -1
t "run --seed above 2^53"
expect_run_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '9007199254740993'" \
    "$f" --seed 9007199254740993
t "run --seed 2^63 (out of long long)"
expect_run_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '9223372036854775808'" \
    "$f" --seed 9223372036854775808
t "run --seed 1e3"
expect_run_fail 2 "bivouac: error: --seed needs an integer in $seed_range, got '1e3'" "$f" --seed 1e3
t "run --repeat 0"
expect_run_fail 2 "bivouac: error: --repeat needs an integer in [1, 1000], got '0'" "$f" --repeat 0
t "run --repeat 1001"
expect_run_fail 2 "bivouac: error: --repeat needs an integer in [1, 1000], got '1001'" \
    "$f" --repeat 1001
t "run --repeat 2.5"
expect_run_fail 2 "bivouac: error: --repeat needs an integer in [1, 1000], got '2.5'" \
    "$f" --repeat 2.5

t "--help states the range of every numeric flag"
: >"$why"
capture "$B" --help
s=0
for flag in "--seed N                   seed in \[0, 2\^53\]" \
    "--repeat N                 run N seeds in \[1, 1000\]" \
    "--tokens N                 tokens to generate, in \[1, 1000000\]" \
    "--temperature T            softmax temperature in \[0, 100\]" \
    "--top-k K                  sample among the K likeliest tokens, K in" \
    "--seed N                   sampling seed in \[0, 2\^53\]"; do
    if ! grep -q -- "$flag" "$tmp/stdout"; then
        echo "--help lacks '$flag'" >>"$why"
        s=1
    fi
done
report $s "$B --help"

t "sample: a prompt character outside the vocabulary is named with its position"
expect_fail 2 "bivouac: error: the prompt has '→' (U+2192) at character 6, which is not in the model's vocabulary of 65 characters" \
    "$B" sample --checkpoint "$ck" --prompt "ROMEO→" --tokens 5
t "sample: a control character outside the vocabulary is shown as its code point"
expect_fail 2 "bivouac: error: the prompt has U+0009 at character 3, which is not in the model's vocabulary of 65 characters" \
    "$B" sample --checkpoint "$ck" --prompt $'ab\tc' --tokens 5
t "sample: a prompt that is not UTF-8 names the byte"
expect_fail 2 "bivouac: error: the prompt is not UTF-8: invalid byte 0xFF at byte 3" \
    "$B" sample --checkpoint "$ck" --prompt $'ab\xffc' --tokens 5

t "plugins --json with a plugin file name that is not UTF-8 is valid JSON"
: >"$why"
mkdir -p "$tmp/odd"
: >"$tmp/odd/model_"$'\xff'".so"
s=0
if ! BIVOUAC_PLUGIN_PATH="$tmp/odd:$BIVOUAC_PLUGIN_PATH" "$B" plugins --json >"$tmp/json" \
    2>"$tmp/stderr"; then
    echo "plugins --json failed" >>"$why"
    s=1
fi
# Decoded as strict UTF-8 whatever the locale (a C locale would let Python pass bad bytes).
if ! got=$(python3 -c 'import json, sys
d = json.loads(sys.stdin.buffer.read().decode("utf-8"))
print([p["file"] for p in d["plugins"] if p["name"] == "\ufffd"][0])' <"$tmp/json" 2>&1); then
    { echo "not valid JSON:"; echo "$got"; } >>"$why"
    s=1
elif [[ $got != "$tmp/odd/model_"$'\xef\xbf\xbd'".so" ]]; then
    echo "the file is listed as '$got', expected the bad byte as U+FFFD" >>"$why"
    s=1
fi
report $s "$B plugins --json"

finish
