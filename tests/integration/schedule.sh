#!/usr/bin/env bash
# `bivouac schedule` (core/src/engine/pipeline/schedule_gen.h): every stage's 1F1B or GPipe
# instructions for one step, run together; the step's time, the bubble (P-1)/(M+P-1) and
# the activations held; bad arguments exit 2 with a message that says what is wrong.
# From an experiment's `pipeline:` section: each stage's layers, costs in proportion, and
# errors at the position of the value they are about, from `bivouac run` as well.
# Environment (set by ctest): BIVOUAC, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
source "$(dirname "$0")/check_lib.bash"

out=$("$BIVOUAC" schedule --stages 2 --microbatches 3)
check "1f1b, 2 stages, 3 microbatches" "$out" "1f1b, 2 stages, 3 microbatches (forward 1, backward 2):
stage 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 F2 SA2>1 RG1<1 B1 RG2<1 B2 U
stage 1: RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 RA2<0 F2 B2 SG2>0 U
step 12, bubble 25.0 %, activations held per stage: 2 1"
check "gpipe holds every microbatch" \
    "$("$BIVOUAC" schedule --stages 4 --microbatches 8 --kind gpipe --forward 2 --backward 4 | tail -1)" \
    "step 66, bubble 27.3 %, activations held per stage: 8 8 8 8"
check "1f1b holds P - s" \
    "$("$BIVOUAC" schedule --stages 4 --microbatches 8 | tail -1)" \
    "step 33, bubble 27.3 %, activations held per stage: 4 3 2 1"

# the timeline picture: a PNG of 1200 x (92 + 40 P + 72) pixels, a fifth or more of it
# coloured (the boxes), and the SVG beside it
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check "--out draws the timeline" \
    "$("$BIVOUAC" schedule --stages 4 --microbatches 8 --out "$tmp/t.png" | tail -1)" \
    "-> $tmp/t.png, $tmp/t.svg"
check "the picture" "$(python3 - "$tmp/t.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
raw, at = b"", 8
while at < len(data):
    n, kind = struct.unpack(">I4s", data[at:at + 8])
    if kind == b"IDAT":
        raw += data[at + 8:at + 8 + n]
    at += 12 + n
pix, bpp = zlib.decompress(raw), {2: 3, 6: 4}[ctype]
stride, prev, coloured = w * bpp, bytearray(w * bpp), 0
for y in range(h):  # undo the PNG row filters (none, sub, up, average, Paeth)
    f, row = pix[y * (stride + 1)], bytearray(pix[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = row[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + b) & 255
        elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    coloured += sum(max(row[x:x + 3]) - min(row[x:x + 3]) > 60 for x in range(0, stride, bpp))
    prev = row
share = coloured / (w * h)
print(f"{w}x{h}", "coloured" if share >= 0.2 else f"blank ({share:.3f})")
PY
)" "1200x324 coloured"
check "the svg beside it" "$(head -c 5 "$tmp/t.svg")" "<?xml"

# ---- from an experiment ----
cat >"$tmp/gpt.yaml" <<EOF
name: gpt-pipeline
model: {plugin: transformer, layers: 4, heads: 4, width: 64}
dataset: {text: $BIVOUAC_DATA_DIR/tinyshakespeare/input.txt}
train: {steps: 10, batch: 4, block: 32}
pipeline:
  stages: 3
  microbatches: 4
EOF
check "an experiment's pipeline" "$("$BIVOUAC" schedule "$tmp/gpt.yaml" | sed -n '1p;$p')" \
    "$tmp/gpt.yaml: 4 layers of model transformer in 3 stages: [0, 1) [1, 2) [2, 4); stage costs in proportion to their layers
step 30, bubble 46.7 %, activations held per stage: 3 2 1"
check "an explicit partition" \
    "$("$BIVOUAC" schedule "$tmp/gpt.yaml" -s pipeline.stages=2 -s pipeline.partition=3,1 | head -1)" \
    "$tmp/gpt.yaml: 4 layers of model transformer in 2 stages: [0, 3) [3, 4); stage costs in proportion to their layers"
# balanced: a profiling pass measures the layers; the stages' costs are printed (the
# times vary from run to run; their shape does not) and the bubble simulated with them
out=$("$BIVOUAC" schedule "$tmp/gpt.yaml" -s pipeline.stages=2 -s pipeline.partition=balanced 2>&1)
check "balanced: every stage's measured costs" \
    "$(echo "$out" | grep -cE '^stage [01]: forward [0-9]+\.[0-9]{2} ms, backward [0-9]+\.[0-9]{2} ms, [0-9]+\.[0-9] MB a microbatch$')" 2
check "balanced: the cut and where its costs come from" \
    "$(echo "$out" | grep -c "^$tmp/gpt.yaml: 4 layers of model transformer in 2 stages: \[0, [1-3]) \[[1-3], 4); stage costs measured in a profiling pass$")" 1
check "balanced: the simulation in milliseconds" \
    "$(echo "$out" | grep -cE '^(1f1b, 2 stages, [0-9]+ microbatches \(milliseconds as measured\):|step [0-9.]+, bubble [0-9.]+ %, activations held per stage: [0-9]+ 1)$')" 2
sed 's/  stages: 3/  stages: 5/' "$tmp/gpt.yaml" >"$tmp/five.yaml"
rc=0; err=$("$BIVOUAC" schedule "$tmp/five.yaml" 2>&1 >/dev/null) || rc=$?
check "5 stages for 4 layers: exit 2" "$rc" 2
check "5 stages for 4 layers: where" "$err" \
    "$tmp/five.yaml:6:11: error: 'stages': 5 stages for 4 layers: a stage would have no layer"
printf '  partition: "2,1"\n' >>"$tmp/gpt.yaml"
rc=0; err=$("$BIVOUAC" schedule "$tmp/gpt.yaml" 2>&1 >/dev/null) || rc=$?
check "a partition that does not add up: where" "$rc: $err" \
    "2: $tmp/gpt.yaml:8:14: error: 'partition': '2,1' gives 2 stages their layers, not 3"
rc=0; err=$("$BIVOUAC" run "$tmp/gpt.yaml" --out "$tmp/run" 2>&1 >/dev/null) || rc=$?
check "run refuses the partition, where" "$rc: $err" \
    "2: $tmp/gpt.yaml:8:14: error: 'partition': '2,1' gives 2 stages their layers, not 3"
check "the refused run made no directory" "$([ -e "$tmp/run" ] && echo made || echo none)" none

bad() { # WANT ARGS...: exit status 2 and the message
    local want=$1 rc=0 err
    shift
    err=$("$BIVOUAC" schedule "$@" 2>&1 >/dev/null) || rc=$?
    check "schedule $*: exit 2" "$rc" 2
    check "schedule $*: message" "$err" "bivouac: error: $want"
}
bad "schedule needs EXP.yaml, or --stages P and --microbatches M" --stages 2
bad "--kind is 1f1b or gpipe, got 'zb'" --kind zb --stages 2 --microbatches 2
bad "--stages needs an integer in [1, 64], got '0'" --stages 0 --microbatches 3
bad "unknown option '--depth' for schedule" --depth 3
bad "--microbatches needs a value" --stages 2 --microbatches
bad "schedule takes its stages, microbatches and kind from x.yaml (set them with -s pipeline.stages=P and the like), not from flags" x.yaml --kind gpipe
bad "-s needs an experiment file" --stages 2 --microbatches 2 -s pipeline.stages=3
bad "--out names a .png file (the .svg goes beside it), got 't.jpg'" --stages 2 --microbatches 2 --out t.jpg
finish
