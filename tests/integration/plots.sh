#!/usr/bin/env bash
# Pictures of runs (issue 20): a run draws DIR/curves.png and curves.svg after training
# (not with --no-plot), `bivouac plot` redraws them, `bivouac compare` prints the runs'
# table and overlays them, a policy's `report` series reach metrics.jsonl and the picture,
# and a run whose plot module cannot be loaded still succeeds with one warning.
set -euo pipefail
: "${BIVOUAC:?}" "${BIVOUAC_SOURCE_DIR:?}"
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
B=$BIVOUAC
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-plots.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR="$tmp/cache"
cd "$tmp"
quick="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"
tiny="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"

# png_size FILE: "WIDTHxHEIGHT" from the IHDR chunk, or "not a png"
png_size() {
    local sig
    sig=$(od -An -tx1 -N8 "$1" | tr -d ' \n')
    if [[ $sig != 89504e470d0a1a0a ]]; then echo "not a png"; return; fi
    local w h
    w=$(od -An -tu4 --endian=big -j16 -N4 "$1" | tr -d ' ')
    h=$(od -An -tu4 --endian=big -j20 -N4 "$1" | tr -d ' ')
    echo "${w}x${h}"
}

"$B" run "$quick" -s train.epochs=30 --out a --quiet >/dev/null
check "a GCN run draws curves.png (loss, accuracy, lr: 2x2 panels)" "$(png_size a/curves.png)" "1200x816"
check "and an SVG beside it" "$(head -c 5 a/curves.svg)" "<?xml"
"$B" run "$quick" -s train.epochs=30 -s train.lr=0.01 --out b --quiet --no-plot >/dev/null
check "--no-plot draws nothing" "$(find b -name "curves.*" | wc -l)" "0"
check "bivouac plot draws them on demand" "$("$B" plot b --x time)" "b/curves.png, b/curves.svg"
check "... against wall time, the same size" "$(png_size b/curves.png)" "1200x816"

out=$("$B" compare a b --out cmp.png)
check "compare: a header and one row per run" "$(grep -c '' <<<"$out")" "5"
check "compare: the runs' rows" "$(awk 'NR==2||NR==3 {print $1, $2, $3}' <<<"$out" | tr '\n' ';')" \
    "a gcn synthetic-communities;b gcn synthetic-communities;"
check "compare: a's test accuracy in %, as result.json has it" \
    "$(awk 'NR==2 {print $4}' <<<"$out")" \
    "$(python3 -c 'import json,sys; print("%.2f" % (100*json.load(open(sys.argv[1]))["test_accuracy"]))' a/result.json)"
check "compare draws the validation series side by side (one row of panels)" "$(png_size cmp.png)" "1200x436"
check "compare's SVG" "$(head -c 5 cmp.svg)" "<?xml"

"$B" run "$quick" -s train.epochs=20 --repeat 2 --out r --quiet >/dev/null
check "--repeat: every seed has its curves" "$([[ -f r/seed-42/curves.png && -f r/seed-43/curves.png ]] && echo yes)" "yes"
check "--repeat: the seeds overlaid at the top" "$(png_size r/curves.png)" "1200x436"
out=$("$B" compare r a --series val_accuracy,train_loss --out cmp2.png)
check "compare of a --repeat run: mean +- std over its seeds" \
    "$(awk 'NR==2 {print $1, $2, $3, $4, $5, $7}' <<<"$out")" "r (2 seeds) gcn synthetic-communities ±"

"$B" run "$quick" -s train.epochs=12 -s policy.file="$BIVOUAC_SOURCE_DIR/tests/data/lua/report_series.lua" \
    --out p --quiet >/dev/null
check "a policy's report action writes series lines" "$(grep -c '"series": "patience_left", "unit": "epochs"' p/metrics.jsonl)" "12"
check "one without a unit" "$(grep -c '"series": "val_gap", "unit": ""' p/metrics.jsonl)" "12"
check "they get panels of their own (5 panels: 3 rows)" "$(png_size p/curves.png)" "1200x1196"

"$B" run "$tiny" -s train.steps=20 --out t --quiet >/dev/null
check "a transformer run draws its curves (loss, lr, gradient norm)" "$(png_size t/curves.png)" "1200x816"

rc=0
err=$(BIVOUAC_PLOT_MODULE=$tmp/none.so "$B" run "$quick" -s train.epochs=5 --repeat 2 --out m --quiet 2>&1 >/dev/null) || rc=$?
check "without the plot module the run succeeds" "$rc" "0"
check "and says so once" "$err" "bivouac: warning: no curves drawn (the plot module cannot be loaded: $tmp/none.so: cannot open shared object file: No such file or directory); the run's results are complete"
check "its results are complete" "$([[ -f m/result.json && -f m/seed-42/result.json ]] && echo yes)" "yes"

"$B" plot a --tensorboard tb >/dev/null
check "plot --tensorboard writes one event file" "$(find tb -name 'events.out.tfevents.*' | wc -l)" "1"
"$B" run "$quick" -s train.epochs=5 --repeat 2 --out tr --quiet --no-plot --tensorboard tbr >/dev/null
check "run --tensorboard with --repeat: one event file a seed, no pictures" \
    "$(find tbr -name 'events.out.tfevents.*' | sed 's|/events.*||' | sort | tr '\n' ' ')$(find tr -name 'curves.*' | wc -l)" \
    "tbr/seed-42 tbr/seed-43 0"

mkdir empty
rc=0
err=$("$B" plot empty 2>&1) || rc=$?
check "plot of a directory that holds no run" "$rc:$err" \
    "2:bivouac: error: empty has no metrics.jsonl (and no seed-N/ with one)"
rc=0
err=$("$B" compare a --out cmp.jpg 2>&1) || rc=$?
check "compare --out names a .png" "$rc:$err" \
    "2:bivouac: error: --out names a .png file (the .svg goes beside it), got 'cmp.jpg'"
finish
