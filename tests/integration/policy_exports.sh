#!/usr/bin/env bash
# Policies call plugin exports (issue 21): plugins.compute.cpu.set_threads changes the
# thread count the run trains with (result.json "threads", and threads() reads it back);
# plugins.resilience.checkpoint.write_now writes a checkpoint of an epoch that is not due,
# once (a resumed run's replay does not write it again); kernel_seconds counts; every kind
# of wrong argument, an effectful export in set-up, an export's own failure and a write
# to the read-only plugins table fail the run with the exact message and script:line;
# `bivouac plugins --json` lists the exports.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
unset BIVOUAC_FAULT_KILL_AFTER_EPOCH
exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/policy.yaml"
script="$BIVOUAC_SOURCE_DIR/tests/data/transformer/policy_exports.lua"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-exports.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR="$tmp/cache"
# check, field, finish and the counters
# shellcheck source=tests/integration/check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
files() { find "$1" -type f -printf '%f\n' | sort | tr '\n' ' '; }
reason() { grep -o '"stop_reason": "[^"]*"' "$1/result.json"; }
# tf CASE [ARGS...]: the transformer (cpu, threads: 2) with policy_exports.lua
tf() {
    local c=$1
    shift
    set +e
    "$BIVOUAC" run "$exp" -s "policy.file=$script" -s "policy.params.case=$c" "$@" \
        --out "$tmp/$c" --quiet >"$tmp/$c.out" 2>"$tmp/$c.err"
    code=$?
    set -e
}
# fails CASE LINE MESSAGE: the call at step 2 stops the run with exactly this error
fails() {
    tf "$1" -s policy.params.at=2
    check "$1: exit status" "$code" 1
    check "$1: message" "$(grep 'policy error' "$tmp/$1.err")" \
        "bivouac: error: run stopped: policy error: $script:$2: $3"
}

# 1. set_threads at step 5 (a step boundary): threads() says 1 at once, and the
#    instance trains (and reports) with 1 from its next kernel on.
tf threads -s policy.params.at=5
check "threads: exit status" "$code" 0
check "threads: read back" "$(reason "$tmp/threads")" \
    '"stop_reason": "policy: threads 0 -> 1"'
check "threads: result.json" "$(field "$tmp/threads" threads)" '"threads": 1'
tf none -s policy.params.at=0
check "threads: without the call" "$(field "$tmp/none" threads)" '"threads": 2'

# 2. kernel_seconds counts from its first call (step 5) on
tf kernel_seconds -s policy.params.at=5
check "kernel_seconds: counted" "$(reason "$tmp/kernel_seconds")" \
    '"stop_reason": "policy: counted true"'

# 3. wrong arguments, refused before the export runs
fails arity 21 "compute.cpu.set_threads takes 1 argument, got 0"
fails arity2 23 "compute.cpu.set_threads takes 1 argument, got 2"
fails string 25 "compute.cpu.set_threads: argument 1 is a string, expected an integer"
fails float 27 \
    "compute.cpu.set_threads: argument 1 is 1.5, expected an integer (a whole number in int64 range)"
fails range 29 \
    "compute.cpu.set_threads: argument 1 is 9.2233720368548e+18, expected an integer (a whole number in int64 range)"
fails nil 31 "compute.cpu.kernel_seconds: argument 1 is nil, expected a string"
fails nul 33 "compute.cpu.kernel_seconds: argument 1 has a NUL byte, expected a plain string"
fails table 35 "compute.cpu.kernel_seconds: argument 1 is a table, expected a string"
# 4. the export's own failures (bv_export_error)
fails unknown_kind 37 \
    "compute.cpu.kernel_seconds: unknown kernel kind 'fft' (gemm, spmm, elementwise, edge, attention, loss or all)"
fails too_many 39 "compute.cpu.set_threads: thread count 1000 is out of range [0, 256] (0: every core)"
# 5. the plugins table is read-only
fails write 44 "attempt to set field 'cpu' of read-only table 'plugins.compute'"
# 6. pcall catches a bad call like any error (no line: pcall, a C function, called it)
tf pcall -s policy.params.at=2
check "pcall: caught" "$(reason "$tmp/pcall")" \
    '"stop_reason": "policy: false: compute.cpu.set_threads: argument 1 is a string, expected an integer"'

# 7. an effectful export in set-up is refused, before anything runs
tf setup_effectful
check "set-up: exit status" "$code" 2
check "set-up: message" "$(grep -c "$script:8: compute.cpu.set_threads is effectful: call it from an event handler, not in set-up" "$tmp/setup_effectful.err")" 1
check "set-up: nothing trained" "$([[ -e $tmp/setup_effectful/metrics.jsonl ]] && echo yes || echo no)" no

# 8. write_now on a graph run: epoch 3 is written though only every 5th is due; killed
#    after epoch 7 and resumed from epoch 5, the replay of epoch 3 writes nothing more.
cat >"$tmp/gcn.yaml" <<YAML
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {name: cora}
train: {epochs: 10, lr: 0.01, seed: 42}
resilience:
  - {plugin: checkpoint, every: 5, keep: 10}
policy: {file: $script, on_error: stop, params: {case: checkpoint, at: 3}}
YAML
"$BIVOUAC" run "$tmp/gcn.yaml" --out "$tmp/ckpt" --quiet >/dev/null 2>&1
check "write_now: checkpoints" "$(files "$tmp/ckpt/checkpoints")" \
    "ckpt-00000003.bvck ckpt-00000005.bvck ckpt-00000010.bvck "
set +e
BIVOUAC_FAULT_KILL_AFTER_EPOCH=7 "$BIVOUAC" run "$tmp/gcn.yaml" --out "$tmp/killed" --quiet \
    >/dev/null 2>&1
code=$?
set -e
check "write_now: the fault-injected run is killed" "$code" 137
"$BIVOUAC" run --resume "$tmp/killed" --quiet >/dev/null 2>&1
check "write_now, resumed: no checkpoint written again by the replay" \
    "$(files "$tmp/killed/checkpoints")" \
    "ckpt-00000003.bvck ckpt-00000005.bvck ckpt-00000010.bvck "
check "write_now, resumed: the uninterrupted run's weights" \
    "$(field "$tmp/killed" params_crc32c)" "$(field "$tmp/ckpt" params_crc32c)"

# 9. bivouac plugins --json lists the exports with their signatures
check "plugins --json: the cpu plugin's exports" \
    "$("$BIVOUAC" plugins --json | jq -r '.plugins[] | select(.kind == "compute" and .name == "cpu") | .exports[] | "\(.name) \(.signature) \(.effectful)"' | tr '\n' ' ')" \
    "threads i: false set_threads !v:i true kernel_seconds d:s false "
check "plugins --json: the checkpoint plugin's export" \
    "$("$BIVOUAC" plugins --json | jq -r '.plugins[] | select(.name == "checkpoint") | .exports[] | "\(.name) \(.signature) \(.effectful)"')" \
    "write_now !v: true"

finish
