#!/usr/bin/env bash
# Bounded asynchrony (docs/staleness.md): the `staleness` resilience plugin gates the graph
# server's tasks, and a training pass runs interval by interval.
#  - nopipe, pipe and async s=0 read only this pass's neighbour rows, so they end with the
#    weights of the ungated run to the bit (GCN and GAT on Cora, threads; GCN with the
#    roles as processes);
#  - the bound, from the versions the graph server recorded for every gather it ran (the
#    gather_lag_max series), not from timing: s=0 never reads rows of an earlier pass,
#    s=1 never of two passes back, and with one tensor worker (two tasks in flight) it
#    does read rows of the pass before, every epoch;
#  - weight stashing: with s=1 intervals run ahead into the next epoch, and a backward
#    that runs after the update between the epochs uses the weights its forward read (from
#    the result's own version, every task); an interval held back (tests/plugins/
#    resilience_hold.c) makes that happen deterministically;
#  - a policy turns s at an epoch boundary (set = {["staleness.s"] = 1}) and the graph
#    server's gate follows from the next epoch on; a knob nobody has is a policy error;
#  - the tick event hands the policy the pass's figures;
#  - two graph servers as processes: the boundary exchanges are barriers; pipe ends with
#    the ungated run's weights;
#  - result.json names the strategy and its settings; bad set-ups are refused with
#    file:line:column (a sequence model, two gates).
# Environment (set by ctest): BIVOUAC, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"
procs_setup staleness # $tmp; the runs' socket directories in $TMPDIR

exp() { # exp NAME MODEL-LINE RESILIENCE [more lines]: $tmp/NAME.yaml
    local name=$1 model=$2 res=$3
    shift 3
    {
        echo "name: $name"
        echo "model: $model"
        echo "dataset: {name: cora, normalize_features: true}"
        echo "train: {epochs: 8, lr: 0.01, weight_decay: 5e-4, seed: 42}"
        echo "engine: {intervals: 8, tensor_workers: 1}"
        echo "compute: {plugin: cpu, threads: 1}"
        [ -n "$res" ] && echo "resilience: [$res]"
        for line in "$@"; do echo "$line"; done
    } >"$tmp/$name.yaml"
}
train() { "$BIVOUAC" run "$tmp/$1.yaml" --out "$tmp/$1" --quiet --no-plot "${@:2}"; }
crc() { field "$tmp/$1" params_crc32c; }
# series NAME RUN: its values, one per epoch, space-separated
series() {
    python3 - "$tmp/$2/metrics.jsonl" "$1" <<'PY'
import json, sys
v = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(f"{r['value']:g}" for r in v if r.get("series") == sys.argv[2]))
PY
}

gcn="{plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}"
gat="{plugin: gat, layers: 2, heads: 8, hidden: 64, out_heads: 1, dropout: 0.6, attn_dropout: 0.6}"

# 1. the modes that read only this pass's rows: the ungated weights, to the bit
exp gcn "$gcn" ""
train gcn
for m in nopipe pipe "async, s: 0"; do
    name=gcn-${m%%,*}
    exp "$name" "$gcn" "{plugin: staleness, mode: $m}"
    train "$name"
    check "GCN, $m: the ungated run's weights" "$(crc "$name")" "$(crc gcn)"
done
exp gat "$gat" ""
sed -i 's/epochs: 8/epochs: 3/' "$tmp/gat.yaml"
train gat
exp gat-pipe "$gat" "{plugin: staleness, mode: pipe}"
sed -i 's/epochs: 8/epochs: 3/' "$tmp/gat-pipe.yaml"
train gat-pipe
check "GAT, pipe: the ungated run's weights" "$(crc gat-pipe)" "$(crc gat)"

# 2. the bound, from the recorded versions
check "async s=0: no gather read rows of an earlier pass" \
    "$(series gather_lag_max gcn-async)" "0 0 0 0 0 0 0 0"
check "pipe: two steps at once at least (a gather beside a task)" \
    "$(python3 -c "print(all(float(x) >= 2 for x in '$(series pipeline_depth_max gcn-pipe)'.split()))")" True
exp gcn-async1 "$gcn" "{plugin: staleness, mode: async, s: 1}"
train gcn-async1
check "async s=1: every epoch read rows of the pass before, none of two passes back" \
    "$(series gather_lag_max gcn-async1)" "1 1 1 1 1 1 1 1"
check "async s=1: result.json names the strategy and its settings" \
    "$(python3 -c "import json; print(json.load(open('$tmp/gcn-async1/result.json'))['resilience'])")" \
    "[{'plugin': 'staleness', 'mode': 'async', 's': 1}]"

# 2b. weight stashing: with s=1 intervals run ahead into the next epoch; the held-back
# interval of tests/plugins/resilience_hold.c makes it happen in epoch 3 (0-based 2) every
# run: the others' forward of epoch 4 reads the weights before the update of epoch 3,
# their backward runs after it landed. Each backward task's result names the weights it
# computed with (the tensor worker's, pulled from the parameter server by version).
check "async s=1: intervals ran ahead, backward tasks on stashed weights, none on others" \
    "$(python3 -c "
import json
r = [json.loads(l) for l in open('$tmp/gcn-async1/metrics.jsonl')]
v = lambda n: [x['value'] for x in r if x.get('series') == n]
print(sum(v('intervals_ahead')) > 0, sum(v('stashed_backward')) > 0, v('stash_mismatch') == [0] * 8,
      set(v('stash_bytes')))")" "True True True {92160}"
build=${BIVOUAC_BUILD_DIR:-$(dirname "$BIVOUAC")}
export BIVOUAC_PLUGIN_PATH="$build/test-plugins/hold${BIVOUAC_PLUGIN_PATH:+:$BIVOUAC_PLUGIN_PATH}"
exp gcn-hold "$gcn" "{plugin: hold, interval: 3, epoch: 2}"
train gcn-hold
check "held interval 3 in epoch 3: others ran ahead, and their backward in epoch 4 used the stashed weights" \
    "$(python3 -c "
import json
r = [json.loads(l) for l in open('$tmp/gcn-hold/metrics.jsonl')]
v = lambda n: [x['value'] for x in r if x.get('series') == n]
print(v('intervals_ahead')[2] > 0, v('stashed_backward')[3] > 0, v('stash_mismatch'))")" \
    "True True [0, 0, 0, 0, 0, 0, 0, 0]"

# 3. a policy turns s between epochs; the tick event sees the pass's figures
cat >"$tmp/turn.lua" <<'LUA'
function on_tick(m)
  if m.epoch == 4 then
    return {set = {["staleness.s"] = 1}, report = {lag_seen = m.gather_lag_max}}
  end
end
LUA
exp gcn-turn "$gcn" "{plugin: staleness, mode: async, s: 0}" "policy: {file: turn.lua}"
train gcn-turn 2>"$tmp/turn.err"
check "policy set s = 1 after epoch 4: stale reads from epoch 5 on" \
    "$(series gather_lag_max gcn-turn)" "0 0 0 0 1 1 1 1"
check "the tick event had the figures (lag 0 in epoch 4)" "$(series lag_seen gcn-turn)" "0"
check "the knob is logged" "$(grep -c 'policy: staleness.s = 1' "$tmp/turn.err")" 1
cat >"$tmp/bad.lua" <<'LUA'
function on_epoch_end(m) if m.epoch == 2 then return {set = {workers = 8}} end end
LUA
exp gcn-bad "$gcn" "{plugin: staleness, mode: async, s: 0}" "policy: {file: bad.lua, on_error: stop}"
rc=0
train gcn-bad 2>"$tmp/bad.err" || rc=$?
check "a knob nobody has: the run stops with the policy error" \
    "$rc $(field "$tmp/gcn-bad" epochs) $(grep -o "policy error: set: no resilience strategy of this run has a knob 'workers' (a knob is <strategy>.<name>, e.g. staleness.s, or compute.lambdas)" "$tmp/gcn-bad/result.json" | wc -l)" \
    '1 "epochs": 2 1'
cat >"$tmp/range.lua" <<'LUA'
function on_epoch_end(m) return {set = {["staleness.s"] = 1.5}} end
LUA
exp gcn-range "$gcn" "{plugin: staleness, mode: async}" "policy: {file: range.lua, on_error: stop}"
rc=0
train gcn-range 2>"$tmp/range.err" || rc=$?
check "s = 1.5: refused by the plugin" \
    "$rc $(grep -c 'staleness.s must be a whole number of epochs in \[0, 1000\], not 1.5' "$tmp/gcn-range/result.json")" "1 1"

# 4. roles as processes: the graph server's own gate
exp gcn-procs "$gcn" "{plugin: staleness, mode: pipe}" \
    "cluster: {graph_servers: 1, param_servers: 2, tensor_workers: 2}" "cloud: {plugin: local}"
run "$tmp/procs" run "$tmp/gcn-procs.yaml" --out "$tmp/gcn-procs" --quiet --no-plot
check "processes, pipe: exit 0 and the ungated run's weights" "$rc $(crc gcn-procs)" "0 $(crc gcn)"
check "processes: nothing of the run left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# 5. two graph servers: the boundary exchanges are barriers of the interval pipeline
exp gcn-g2 "$gcn" "" "cluster: {graph_servers: 2, param_servers: 1, tensor_workers: 2}" \
    "cloud: {plugin: local}"
run "$tmp/g2" run "$tmp/gcn-g2.yaml" --out "$tmp/gcn-g2" --quiet --no-plot
for m in pipe "async, s: 1"; do
    name=gcn-g2-${m%%,*}
    exp "$name" "$gcn" "{plugin: staleness, mode: $m}" \
        "cluster: {graph_servers: 2, param_servers: 1, tensor_workers: 2}" "cloud: {plugin: local}"
    run "$tmp/$name" run "$tmp/$name.yaml" --out "$tmp/$name" --quiet --no-plot
    check "two graph servers, $m: exit 0, nothing left" "$rc $(leftovers "$pgid")" \
        "0 processes 0, socket dirs 0"
done
check "two graph servers, pipe: the ungated run's weights" "$(crc gcn-g2-pipe)" "$(crc gcn-g2)"
check "two graph servers, async s=1: no rows of two passes back" \
    "$(python3 -c "v = '$(series gather_lag_max gcn-g2-async)'.split(); print(len(v), all(float(x) <= 1 for x in v))")" \
    "8 True"

# 6. set-ups that cannot work
exp two-gates "$gcn" "{plugin: staleness}, {plugin: staleness, mode: pipe}"
rc=0
"$BIVOUAC" check "$tmp/two-gates.yaml" 2>"$tmp/two-gates.err" || rc=$?
check "two gates: refused" "$rc $(head -1 "$tmp/two-gates.err")" \
    "2 $tmp/two-gates.yaml:7:35: error: resilience 'staleness' gates tasks, and so does 'staleness': at most one strategy may"
cat >"$tmp/seq.yaml" <<'YAML'
model: {plugin: transformer}
dataset: {text: seq.txt}
resilience: [{plugin: staleness}]
YAML
head -c 4000 /dev/urandom | base64 >"$tmp/seq.txt"
rc=0
"$BIVOUAC" check "$tmp/seq.yaml" 2>"$tmp/seq.err" || rc=$?
check "a sequence model: refused" "$rc $(grep -c "seq.yaml:3:14: error: resilience 'staleness' gates the graph engine's tasks; this model runs on the sequence engine" "$tmp/seq.err")" "2 1"
finish
