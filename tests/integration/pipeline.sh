#!/usr/bin/env bash
# The pipeline engine (docs/pipeline.md) with stages as threads, on a 4-block transformer
# with dropout and the tied output projection:
# - P = 1, 2 and 4 stages (and 2 cut by a profiling pass, partition: balanced) with the
#   same M = 4 microbatches and the same threads give the same final weights,
#   bit for bit (each stage sums the same terms in the same order: the microbatches'
#   gradients in microbatch order, the tied projection's two halves once at the end, the
#   gradient norm tensor by tensor in layer order);
# - they, D = 2 pipelines x P = 2 stages and GPipe's schedule end within 1e-5 (relative)
#   of the one-process run (M = 1), whose gradients sum the whole batch in one product;
# - the same seed twice gives the same bits (D = 2: the ring all-reduce's order is fixed);
# - with the redundancy plugin (eflb on 4 stages, lflb on 2 x 2, efeb on 3) the weights are
#   those of the run without it, and every stage's replica of the next stage's layers
#   ends equal to them, bit for bit;
# - a run killed after step 25 and resumed from its checkpoint ends with the same weights
#   (and, with the redundancy plugin, replicas equal to their originals again);
# - a batch that does not cut into whole microbatches is refused at its position.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-pipeline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1/result.json" | head -1; }
# run NAME STAGES PIPELINES MICROBATCHES [more -s overrides]
run() {
    local name=$1 p=$2 d=$3 m=$4
    shift 4
    "$BIVOUAC" run "$exp" --out "$tmp/$name" --quiet --no-plot -s model.layers=4 \
        -s model.dropout=0.1 -s train.batch=8 -s pipeline.stages="$p" \
        -s pipeline.pipelines="$d" -s pipeline.microbatches="$m" "$@" >/dev/null
}
same() { # same NAME_A NAME_B FIELD
    if [ "$(field "$tmp/$1" "$3")" = "$(field "$tmp/$2" "$3")" ]; then
        echo "ok: $2 has $1's $3 $(field "$tmp/$1" "$3")"
    else
        echo "FAIL: $2's $3 is $(field "$tmp/$2" "$3"), $1's $(field "$tmp/$1" "$3")" >&2
        failed=1
    fi
}
close() { # close NAME_A NAME_B FIELD: within 1e-5 relative
    local a b
    a=$(field "$tmp/$1" "$3")
    b=$(field "$tmp/$2" "$3")
    if awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }'; then
        echo "ok: $2's $3 $b is within 1e-5 of $1's $a"
    else
        echo "FAIL: $2's $3 $b is not within 1e-5 of $1's $a" >&2
        failed=1
    fi
}

run one 1 1 1
for p in 1 2 4; do run "p$p" "$p" 1 4; done
run d2p2 2 2 2
run d2p2-again 2 2 2
run gpipe 2 1 4 -s pipeline.schedule=gpipe
run balanced 2 1 4 -s pipeline.partition=balanced
# Bamboo's redundancy: replicas of the next stage, its forward in the bubble (eflb)
run eflb 4 1 4 -s 'resilience=[{plugin: redundancy, mode: eflb}]'
run lflb 2 2 2 -s 'resilience=[{plugin: redundancy, mode: lflb}]'
# ... and its backward too (efeb), on 3 stages: every case of where the replica's output
# gradient comes from (the loss, the stage after it, a second send from two stages on)
run efeb 3 1 4 -s 'resilience=[{plugin: redundancy, mode: efeb}]'
run p3 3 1 4

for r in p2 p4 balanced; do same p1 "$r" params_crc32c; same p1 "$r" val_loss; done
same d2p2 d2p2-again params_crc32c
same p1 eflb params_crc32c  # the redundant work changes nothing of the training
same d2p2 lflb params_crc32c
same p3 efeb params_crc32c
for r in eflb:4 lflb:4 efeb:3; do
    n=${r#*:} r=${r%:*}
    [ "$(field "$tmp/$r" replicas)" = "$n" ] && [ "$(field "$tmp/$r" replicas_equal)" = "$n" ] &&
        echo "ok: $r: $n replicas, each equal to its original" ||
        { echo "FAIL: $r: replicas $(field "$tmp/$r" replicas), equal $(field "$tmp/$r" replicas_equal)" >&2; failed=1; }
done
for r in p1 p2 p4 d2p2 gpipe; do close one "$r" val_loss; close one "$r" last_step_loss; done
for f in pipeline_stages pipelines microbatches; do
    [ "$(field "$tmp/d2p2" $f)" = 2 ] || { echo "FAIL: d2p2's $f is $(field "$tmp/d2p2" $f)" >&2; failed=1; }
done
if grep -q '"pipeline_bubble"' "$tmp/p4/metrics.jsonl"; then
    echo "ok: metrics.jsonl has the pipeline_bubble series"
else
    echo "FAIL: no pipeline_bubble series in metrics.jsonl" >&2; failed=1
fi
# Bamboo's Figure 11 throughput: a point a step, samples a second of the step's wall time
got=$(python3 - "$tmp/p4/metrics.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "train_loss" in r]
tp = [r for r in recs if r.get("series") == "samples_per_second"]
ok = all(r["unit"] == "samples/s" and r["value"] > 0 for r in tp)
print(f"{len(tp)} of {len(steps)}, {'positive samples/s' if ok else 'not all positive samples/s'}")
EOF
)
want=$(grep -c '"train_loss"' "$tmp/p4/metrics.jsonl")
[ "$got" = "$want of $want, positive samples/s" ] &&
    echo "ok: metrics.jsonl has the samples_per_second series, a point a step" ||
    { echo "FAIL: samples_per_second series: got '$got', want '$want of $want, positive samples/s'" >&2; failed=1; }

# killed after step 25 (its checkpoint is step 20's), resumed: the same weights, and the
# redundancy plugin's replicas read back from the originals' blobs, equal to them again
keep=(-s 'resilience=[{plugin: checkpoint, every: 10, keep: 3}, {plugin: redundancy}]')
set +e
BIVOUAC_FAULT_KILL_AFTER_EPOCH=25 run killed 2 1 2 "${keep[@]}" 2>/dev/null
code=$?
set -e
[ $code -eq 137 ] || { echo "FAIL: the fault-injected run exited $code, want 137" >&2; exit 1; }
"$BIVOUAC" run --resume "$tmp/killed" --quiet --no-plot >/dev/null
run whole 2 1 2 "${keep[@]}"
same whole killed params_crc32c
same whole killed val_loss
same whole killed replicas_equal

set +e
"$BIVOUAC" run "$exp" --out "$tmp/bad" -s pipeline.pipelines=3 -s pipeline.microbatches=2 \
    2>"$tmp/err" >/dev/null
code=$?
set -e
want="train.batch (4) must be a multiple of pipelines x microbatches (3 x 2): every microbatch has the same number of sequences"
if [ $code -eq 2 ] && grep -qF "<command line>:1:23: error: $want" "$tmp/err"; then
    echo "ok: refused: $(head -1 "$tmp/err")"
else
    echo "FAIL: exit $code, $(cat "$tmp/err"), want 2 and '$want'" >&2; failed=1
fi
exit $failed
