#!/usr/bin/env bash
# Bad messages sent to every inbox of a running cluster run (tests/tools/frame_fuzz.c:
# one frame or three, random or bit-flipped headers and payloads, truncated, another wire
# version, too short, array sizes that overflow) for a bounded time: no role crashes, the
# run ends exactly as one that was left alone (params_crc32c, accuracies, metrics), and
# every role counts what it dropped: each role process and the coordinator report
# "dropped N messages that failed their checks", N as many as were sent to the inboxes
# they read to the end (a tensor worker's weights inbox is read only when it pulls, so
# its count lies between what went to its task inbox and what went to both).
# Environment (set by ctest): BIVOUAC, BIVOUAC_FRAME_FUZZ, BIVOUAC_DATA_DIR.
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_FRAME_FUZZ:?BIVOUAC_FRAME_FUZZ must name the frame_fuzz tool}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
source "$(dirname "$0")/check_lib.bash"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-cluster-fuzz.XXXXXX")
group=
cleanup() {
    [ -z "$group" ] || kill -KILL -- "-$group" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
export BIVOUAC_CACHE_DIR=${BIVOUAC_CACHE_DIR:-$tmp/cache}
export TMPDIR="$tmp/sockets"
mkdir -p "$TMPDIR"

cat >"$tmp/gcn.yaml" <<'EOF'
name: gcn-cluster-fuzz
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {name: cora, normalize_features: true}
train: {epochs: 2000, lr: 0.01, weight_decay: 5e-4, seed: 5}
compute: {plugin: cpu, threads: 1}
engine: {intervals: 2}
cluster: {tensor_workers: 2}
cloud: {plugin: local}
EOF

"$BIVOUAC" run "$tmp/gcn.yaml" --out "$tmp/calm" --quiet >/dev/null 2>"$tmp/calm.err"

setsid bash -c 'echo $$ >"$0"; exec "$@"' "$tmp/pgid" "$BIVOUAC" run "$tmp/gcn.yaml" \
    --out "$tmp/fuzzed" --quiet >"$tmp/fuzzed.out" 2>"$tmp/fuzzed.err" </dev/null &
run=$!
until [ -s "$tmp/pgid" ]; do sleep 0.01; done
group=$(cat "$tmp/pgid")
# the roles are up once the first epoch is written; fuzz while the run goes on
until [ -s "$tmp/fuzzed/metrics.jsonl" ] || ! kill -0 "$run" 2>/dev/null; do sleep 0.01; done
book=$(echo "$TMPDIR"/bivouac-*/book)
"$BIVOUAC_FRAME_FUZZ" "$book" 1 7 >"$tmp/sent"
lines_after_fuzz=$(wc -l <"$tmp/fuzzed/metrics.jsonl")
rc=0
wait "$run" || rc=$?
check "fuzzed run exits 0" "$rc" 0
[ "$rc" = 0 ] || cat "$tmp/fuzzed.err" >&2
# the fuzzing ended in the first half of the run (2,000 epochs: Cora's epochs, as sparse
# rows, take ~3 ms here), so every role was still reading what it sent
lines_total=$(wc -l <"$tmp/fuzzed/metrics.jsonl")
check "epochs still to run after the fuzzing (so all is read)" \
    "$([ $((2 * lines_after_fuzz)) -lt "$lines_total" ] && echo yes ||
        echo "no: $lines_after_fuzz of $lines_total")" yes
for f in params_crc32c test_accuracy val_accuracy train_loss epochs; do
    check "fuzzed run: $f as left alone" "$(field "$tmp/fuzzed" $f)" "$(field "$tmp/calm" $f)"
done
check "metrics.jsonl as left alone (but for seconds and cost)" \
    "$(sed -E 's/, "(seconds|cost_usd)": [^,}]+//g' "$tmp/fuzzed/metrics.jsonl" | md5sum)" \
    "$(sed -E 's/, "(seconds|cost_usd)": [^,}]+//g' "$tmp/calm/metrics.jsonl" | md5sum)"

sent_to() { awk -v s="/$1\$" '$1 ~ s {print $2}' "$tmp/sent"; }
dropped() { # PREFIX: N from "PREFIX ... dropped N message(s) that failed their checks"
    sed -n "s/^$1.*dropped \([0-9]*\) messages\{0,1\} that failed their checks$/\1/p" \
        "$tmp/fuzzed.err"
}
check "coordinator counted all it was sent" \
    "$(dropped 'bivouac: warning: the coordinator')" "$(sent_to coord)"
check "graph server counted all it was sent" \
    "$(dropped '\[graph server\] bivouac: warning: graph server:')" "$(sent_to gs0)"
check "parameter server counted all it was sent" \
    "$(dropped '\[parameter server\] bivouac: warning: parameter server:')" "$(sent_to ps0)"
for i in 0 1; do
    n=$(dropped "\[tensor worker $i\] bivouac: warning: tensor worker $i:")
    lo=$(sent_to "tw$i")
    hi=$((lo + $(sent_to "tw$i-weights")))
    check "tensor worker $i counted what it read ($lo <= ${n:-none} <= $hi)" \
        "$([ -n "$n" ] && [ "$n" -ge "$lo" ] && [ "$n" -le "$hi" ] && echo yes || echo no)" yes
done
check "the calm run dropped nothing" "$(grep -c 'failed their checks' "$tmp/calm.err" || true)" 0
check "nothing left" "$(pgrep -g "$group" | wc -l) $(find "$TMPDIR" -mindepth 1 | wc -l)" "0 0"
finish
