#!/usr/bin/env bash
# Training is a function of the experiment and the seed: the same seed twice gives the same
# result.json (times, memory and the cost aside), the same metrics.jsonl ("seconds" and
# "cost_usd" aside) and the same final weights (params_crc32c); another seed gives other
# weights; a --repeat run gives each seed exactly what a run of that seed alone gives (no
# state leaks between repeats); and tasks sharing the graph server's arrays give what tasks
# carrying copies give.
# Environment (set by ctest): BIVOUAC (the binary), BIVOUAC_DATA_DIR, BIVOUAC_SOURCE_DIR;
# BIVOUAC_CACHE_DIR is honoured (default: a temporary directory).
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
EPOCHS=${DETERMINISM_EPOCHS:-30}
experiment="$BIVOUAC_SOURCE_DIR/configs/gcn-cora.yaml"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-determinism.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR=${BIVOUAC_CACHE_DIR:-$tmp/cache}

passed=0
failed=0
ok() {
    passed=$((passed + 1))
    echo "ok: $*"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*" >&2
}

# train OUT_DIR ARGS...: a run that must succeed.
train() {
    local out=$1
    shift
    if ! "$BIVOUAC" run "$experiment" -s "train.epochs=$EPOCHS" --out "$out" --quiet "$@" \
        >"$out.stdout" 2>"$out.stderr"; then
        cat "$out.stderr" >&2
        echo "FAIL: bivouac run $* --out $out failed" >&2
        echo "$passed passed, $((failed + 1)) failed"
        exit 1
    fi
}

# The timing fields are the only ones allowed to differ; strip them as text, so what is
# compared is otherwise byte for byte what was written.
# The load time and the peak memory vary from run to run, and the cost follows from the wall
# time: its total, the value, the breakdown's seconds and usd.
strip_result() {
    sed -E 's/, "(wall_seconds|load_seconds|peak_rss_mb|cost_usd|value|tokens_per_usd)": [^,}]+//g;
            s/"(seconds|usd)": [^,}]+/"\1": _/g' "$1"
}
strip_metrics() { sed -E 's/, "seconds": [^,}]+//; s/, "cost_usd": [^,}]+//' "$1"; }
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# same_run LABEL DIR_A DIR_B: identical result.json and metrics.jsonl but for timings.
same_run() {
    local label=$1 a=$2 b=$3
    if cmp -s <(strip_result "$a/result.json") <(strip_result "$b/result.json"); then
        ok "$label: result.json identical (crc $(field "$a/result.json" params_crc32c))"
    else
        fail "$label: result.json differs"
        diff <(strip_result "$a/result.json") <(strip_result "$b/result.json") >&2 || true
    fi
    if cmp -s <(strip_metrics "$a/metrics.jsonl") <(strip_metrics "$b/metrics.jsonl"); then
        ok "$label: metrics.jsonl identical but for \"seconds\""
    else
        fail "$label: metrics.jsonl differs beyond \"seconds\""
        diff <(strip_metrics "$a/metrics.jsonl") <(strip_metrics "$b/metrics.jsonl") | head -6 >&2 || true
    fi
}

train "$tmp/s42-a" --seed 42
train "$tmp/s42-b" --seed 42
train "$tmp/s43" --seed 43

# The runs are what the test thinks they are (otherwise "identical" proves little).
for d in s42-a s42-b s43; do
    lines=$(wc -l <"$tmp/$d/metrics.jsonl")
    timed=$(grep -c '"seconds": ' "$tmp/$d/metrics.jsonl" || true)
    if [[ $(field "$tmp/$d/result.json" epochs) == "$EPOCHS" && $lines == "$EPOCHS" &&
        $timed == "$EPOCHS" ]]; then
        ok "$d: $EPOCHS epochs, $EPOCHS metrics lines, each with \"seconds\""
    else
        fail "$d: expected $EPOCHS epochs and metrics lines with \"seconds\", got epochs" \
            "$(field "$tmp/$d/result.json" epochs), $lines lines, $timed with seconds"
    fi
done

same_run "seed 42 twice" "$tmp/s42-a" "$tmp/s42-b"

crc42=$(field "$tmp/s42-a/result.json" params_crc32c)
crc43=$(field "$tmp/s43/result.json" params_crc32c)
if [[ $crc42 =~ ^[0-9a-f]{8}$ && $crc43 =~ ^[0-9a-f]{8}$ && $crc42 != "$crc43" ]]; then
    ok "seeds 42 and 43 give different weights ($crc42 vs $crc43)"
else
    fail "seeds 42 and 43 should give different 8-digit params_crc32c, got '$crc42' and '$crc43'"
fi
if cmp -s <(strip_metrics "$tmp/s42-a/metrics.jsonl") <(strip_metrics "$tmp/s43/metrics.jsonl"); then
    fail "seeds 42 and 43 gave identical metrics.jsonl"
else
    ok "seeds 42 and 43 give different metrics"
fi

# --repeat 2 from seed 42 trains seeds 42 and 43 in one process, into seed-N/.
train "$tmp/rep" --seed 42 --repeat 2
same_run "--repeat 2, seed 42 vs a run of seed 42 alone" "$tmp/s42-a" "$tmp/rep/seed-42"
same_run "--repeat 2, seed 43 vs a run of seed 43 alone" "$tmp/s43" "$tmp/rep/seed-43"

# Tensor tasks reading and writing the graph server's arrays in place (engine.share_arrays,
# the default) compute exactly what tasks carrying copies do, with several intervals and
# workers in flight; for GCN (tensor stages only) and GAT (edge stages too: 7 intervals
# over the 4 slots of partial gradients its backward edge tasks write, so tasks wait for
# a slot to be added up and free).
for model in gcn gat; do
    experiment="$BIVOUAC_SOURCE_DIR/configs/$model-cora.yaml"
    for share in true false; do
        train "$tmp/$model-share-$share" --seed 42 -s "train.epochs=$((EPOCHS / 3))" \
            -s engine.intervals=7 -s engine.tensor_workers=2 -s "engine.share_arrays=$share"
    done
    if grep -qx '  share_arrays: false' "$tmp/$model-share-false/experiment.yaml"; then
        ok "$model: the copying run ran with share_arrays: false"
    else
        fail "$model: experiment.yaml of the copying run does not say share_arrays: false"
    fi
    same_run "$model, engine.share_arrays true vs false" "$tmp/$model-share-true" \
        "$tmp/$model-share-false"
done

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
