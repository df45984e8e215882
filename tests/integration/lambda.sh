#!/usr/bin/env bash
# Tensor tasks on serverless functions (docs/lambda.md): compute: {plugin: lambda} runs
# the graph engine's tensor tasks as invocations of function workers that each graph
# server's controller starts through the `local` cloud.
#  - GCN and GAT on Cora end with the weights of the cpu run, to the bit; so do they with
#    a tenth of the invocations failing, hanging or killed (seeded faults): every lost task
#    invoked again (relaunches = lost + timed out), a late duplicate never applied twice;
#  - tensor rematerialisation (remat: true): the same weights, fewer bytes sent;
#  - task fusion (fuse: true): GCN gathering first and GAT, the same weights, faults and
#    all, one task an interval for the last stage, the loss and its backward;
#  - a bandwidth limit: an invocation takes at least its bytes' time on the link; with
#    worker-internal streaming (stream: true) the weights are the same;
#  - two graph servers, each with its controller: the cpu cluster's weights, faults and all;
#  - the counts: one invocation per task (GCN: 64 an epoch over 8 intervals), cold starts
#    at most the workers kept when they stay warm, every invocation cold when keep_warm is
#    0; billed time in 100 ms steps, GB-seconds at the memory cap, the ledger's charge
#    priced by the table ($0.20 per million requests, $0.0000166667 per GB-second);
#  - the knob compute.lambdas: a policy turns it, the workers follow from the next epoch;
#    out of range, it is a policy error; autotune_lambdas.lua runs and reports its target;
#  - a worker over its memory cap is killed by the platform: the run stops with the words
#    of the loss, not a hang;
#  - nothing is left: no process of the run's group, no socket directory;
#  - bad set-ups are refused with file:line:column, exit 2.
# Environment (set by ctest): BIVOUAC, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"
procs_setup lambda # $tmp; the runs' socket directories in $TMPDIR

gcn="{plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}"
gat="{plugin: gat, layers: 2, heads: 8, hidden: 64, out_heads: 1, dropout: 0.6, attn_dropout: 0.6}"
exp() { # exp NAME MODEL EPOCHS COMPUTE [more lines]: $tmp/NAME.yaml
    local name=$1 model=$2 epochs=$3 compute=$4
    shift 4
    {
        echo "name: $name"
        echo "model: $model"
        echo "dataset: {name: cora, normalize_features: true}"
        echo "train: {epochs: $epochs, lr: 0.01, weight_decay: 5e-4, seed: 42}"
        echo "engine: {intervals: 8}"
        echo "compute: $compute"
        for line in "$@"; do echo "$line"; done
    } >"$tmp/$name.yaml"
}
cpu="{plugin: cpu, threads: 1}"
fn="{plugin: lambda, threads: 1, lambdas: 4}"
# A worker of a release build holds 20-30 MB on Cora; under AddressSanitizer about 200,
# over the default cap of 192: the tests that are not about the cap give it room. The
# faulty runs' workers use whole cores (lambda_cpu: 0), so that a task never takes near
# the short time limit that keeps the hung invocations brief, even under the sanitizers.
cloudline="cloud: {plugin: local, lambda_memory_mb: 1024}"
faults="cloud: {plugin: local, lambda_memory_mb: 1024, lambda_cpu: 0, lambda_fail: 0.04, lambda_hang: 0.03, lambda_kill: 0.03, lambda_time_limit: 0.5}"
train() { # a run that fails shows why (some are meant to: their checks say so)
    run "$tmp/$1" run "$tmp/$1.yaml" --out "$tmp/$1" --quiet --no-plot "${@:2}"
    if [ "$rc" != 0 ]; then
        echo "($1 ended with exit $rc:)"
        tail -n 5 "$tmp/$1.err"
    fi
}
crc() { field "$tmp/$1" params_crc32c; }
num() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/result.json"))[sys.argv[2]])' "$tmp/$1" "$2"; }
series() {
    python3 - "$tmp/$2/metrics.jsonl" "$1" <<'PY'
import json, sys
v = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(f"{r['value']:g}" for r in v if r.get("series") == sys.argv[2]))
PY
}

# 1. GCN: the cpu run's weights, with and without faults
exp gcn "$gcn" 8 "$cpu"
train gcn
exp gcn4 "$gcn" 4 "$cpu"
train gcn4
exp gcn-fn "$gcn" 8 "$fn" "$cloudline"
train gcn-fn
check "GCN on functions: exit 0" "$rc" 0
check "GCN on functions: the cpu run's weights" "$(crc gcn-fn)" "$(crc gcn)"
check "GCN on functions: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
check "one invocation per task: 8 intervals x (2 AV + loss + 2 ∇AV + 2 AV + loss) x 8 epochs" \
    "$(num gcn-fn lambda_invocations)" 512
check "warm workers: started at most 4 (the knob), none lost" \
    "$(python3 -c "print($(num gcn-fn lambda_cold_starts) <= 4, $(num gcn-fn lambda_relaunches))")" \
    "True 0"
check "billed in 100 ms steps, for the cap's 1024 MB" \
    "$(python3 -c "b, g = $(num gcn-fn lambda_billed_seconds), $(num gcn-fn lambda_gb_seconds); print(abs(b * 10 - round(b * 10)) < 1e-6, abs(g - b) < 1e-9 * g)")" \
    "True True"
check "the ledger charges the invocations at the table's prices" \
    "$(python3 - "$tmp/gcn-fn/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cost_breakdown"]["lambda"]
usd = c["invocations"] * 0.20e-6 + c["gb_seconds"] * 0.0000166667
print(c["invocations"] == r["lambda_invocations"], abs(c["usd"] - usd) <= 1e-9 * usd,
      r["cost_usd"] > c["usd"])
PY
)" "True True True"
check "metrics.jsonl: invocations per epoch" "$(series lambda_invocations gcn-fn)" \
    "64 64 64 64 64 64 64 64"

exp gcn-faults "$gcn" 4 "$fn" "$faults"
train gcn-faults
check "GCN, 10 % of invocations lost: exit 0" "$rc" 0
check "GCN, 10 % of invocations lost: the cpu run's weights" "$(crc gcn-faults)" "$(crc gcn4)"
check "every lost invocation made again (relaunches = lost + timed out > 0)" \
    "$(python3 -c "r, l, t = $(num gcn-faults lambda_relaunches), $(num gcn-faults lambda_lost), $(num gcn-faults lambda_timeouts); print(r == l + t, r > 0, t > 0)")" \
    "True True True"
check "GCN with faults: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# two graph servers, each with its own controller and its share of the worker slots: the
# weights of the cpu cluster with two graph servers, faults and all; 2 x 8 intervals x 8
# tasks x 3 epochs invoked once each, besides the relaunches
exp g2 "$gcn" 3 "$cpu" "cluster: {graph_servers: 2, tensor_workers: 2}" "cloud: {plugin: local}"
train g2
exp g2-fn "$gcn" 3 "$fn" "cluster: {graph_servers: 2}" "$faults"
train g2-fn
check "two graph servers on functions, with faults: the cpu cluster's weights" \
    "$(crc g2-fn) $(python3 -c "print($(num g2-fn lambda_invocations) - $(num g2-fn lambda_relaunches))")" \
    "$(crc g2) 384"

# 2. GAT (edge tasks carry their edges to every invocation)
exp gat "$gat" 2 "$cpu"
train gat
exp gat-fn "$gat" 2 "$fn" "$faults"
train gat-fn
check "GAT on functions, with faults: the cpu run's weights" "$(crc gat-fn)" "$(crc gat)"
check "GAT with faults: relaunches reported" \
    "$(python3 -c "print($(num gat-fn lambda_relaunches) > 0)")" True

# 3. tensor rematerialisation: backward tasks without their forward's output, the same bits
exp remat "$gcn" 8 "{plugin: lambda, threads: 1, lambdas: 4, remat: true}" "$cloudline"
train remat
check "remat: the cpu run's weights, fewer bytes to the workers" \
    "$(crc remat) $(python3 -c "print($(num remat lambda_bytes_to) < $(num gcn-fn lambda_bytes_to))")" \
    "$(crc gcn) True"

# 3b. task fusion: the model's last stage forward, the loss and the stage's backward in
# one invocation (the last AV and the next ∇AV, Dorylus §6); the same bits, fewer
# invocations: GCN gathering first, 8 intervals x (AV0, fused, ∇AV0 + AV0, fused) an epoch
gcn_gf="{plugin: gcn, hidden: 16, layers: 2, dropout: 0.5, order: gather_first}"
exp gf "$gcn_gf" 3 "$cpu"
train gf
exp gf-fuse "$gcn_gf" 3 "{plugin: lambda, threads: 1, lambdas: 4, fuse: true}" "$faults"
train gf-fuse
check "fusion (GCN gathering first), with faults: the cpu run's weights, 40 tasks an epoch" \
    "$(crc gf-fuse) $(python3 -c "print($(num gf-fuse lambda_invocations) - $(num gf-fuse lambda_relaunches))")" \
    "$(crc gf) 120"
exp gat-fuse "$gat" 2 "{plugin: lambda, threads: 1, lambdas: 4, fuse: true}" "$cloudline"
train gat-fuse
check "fusion (GAT: its OUT stage, the loss and ∇OUT): the cpu run's weights" \
    "$(crc gat-fuse)" "$(crc gat)"
check "fusion: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# 4. the bandwidth: every invocation takes at least its bytes' time on a 2 Mbit/s link
# (slow enough for Cora's features, which travel as their sparse rows, to take 100 ms)
exp slow "$gcn" 1 "$fn" "cloud: {plugin: local, lambda_memory_mb: 1024, lambda_bandwidth_mbps: 2}"
train slow
check "2 Mbit/s: the mean invocation takes at least its mean task's bytes / 250 kB/s" \
    "$(python3 - "$tmp/slow" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/result.json"))
ms = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
task_ms = [m["value"] for m in ms if m.get("series") == "lambda_task_ms"][0]
bound = 1e3 * r["lambda_bytes_to"] / r["lambda_invocations"] / 2.5e5
print(task_ms >= bound, bound > 100)
PY
)" "True True"

exp stream "$gcn" 2 "{plugin: lambda, threads: 1, lambdas: 4, stream: true}" \
    "cloud: {plugin: local, lambda_memory_mb: 1024, lambda_bandwidth_mbps: 200}"
train stream
exp gcn2 "$gcn" 2 "$cpu"
train gcn2
check "streaming (forward tasks in halves, under a bandwidth limit): the cpu run's weights" \
    "$(crc stream)" "$(crc gcn2)"

# 5. keep_warm 0: every invocation starts a worker
exp cold "$gcn" 1 "$fn" "cloud: {plugin: local, lambda_memory_mb: 1024, lambda_keep_warm: 0}"
train cold
check "keep_warm 0: as many cold starts as invocations" \
    "$(num cold lambda_cold_starts)" "$(num cold lambda_invocations)"

# 6. the knob: a policy turns it; out of range is a policy error; the autotuner
cat >"$tmp/turn.lua" <<'LUA'
function on_tick(m)
  if m.epoch == 2 then
    return {set = {["compute.lambdas"] = 2}, report = {seen = m.lambdas}}
  end
end
LUA
exp turn "$gcn" 4 "$fn" "$cloudline" "policy: {file: turn.lua}"
train turn
check "compute.lambdas = 2 after epoch 2: the graph server keeps 2 from epoch 3" \
    "$(series lambdas turn)" "4 4 2 2"
check "the tick event had the count" "$(series seen turn)" "4"
check "at most 2 workers alive in epochs 3 and 4" "$(series lambda_workers_max turn | cut -d' ' -f3-)" \
    "2 2"
sed -i 's/= 2}/= 99}/' "$tmp/turn.lua"
train turn --force
check "compute.lambdas = 99: the policy's error stops the run" \
    "$(grep -c "compute.lambdas must be 1 .. 32" "$tmp/turn.err")" 1
sed -i 's/compute.lambdas"\] = 99/compute.workers"] = 2/' "$tmp/turn.lua"
train turn --force
check "compute.workers: no such knob, a policy error" \
    "$(grep -c "compute.workers: the graph engine's compute knob is compute.lambdas" "$tmp/turn.err")" 1
exp tune "$gcn" 4 "{plugin: lambda, threads: 1}" "$cloudline" \
    "policy: {file: $BIVOUAC_SOURCE_DIR/scripts/lua/autotune_lambdas.lua, params: {max: 8}}"
train tune
check "the autotuner ran every epoch, from min(intervals, slots) = 8 workers" \
    "$(rc=$rc; echo "$rc $(series lambdas tune | cut -d' ' -f1) $(series autotune_target tune | wc -w)")" \
    "0 8 4"
exp tune-cpu "$gcn" 2 "$cpu" "policy: {file: $BIVOUAC_SOURCE_DIR/scripts/lua/autotune_lambdas.lua}"
train tune-cpu
check "the autotuner on a run without functions: its words" \
    "$(grep -c "its tensor tasks do not run on functions" "$tmp/tune-cpu.err")" 1

# 7. a worker over its memory cap: killed, and the run says why, without hanging
exp small "$gcn" 2 "$fn" "cloud: {plugin: local, lambda_memory_mb: 8}"
train small
check "memory cap 8 MB: the run fails (exit 1)" "$rc" 1
check "... saying the platform killed the worker for its memory" \
    "$(grep -c "used [0-9]* MB of its 8 MB: killed" "$tmp/small.err" | awk '{print ($1 > 0)}')" 1
check "... and that the task lost every invocation" \
    "$(grep -c "lost 8 invocations in a row" "$tmp/small.err")" 1
check "memory cap: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# 8. refusals: file:line:column, exit 2
exp nocloud "$gcn" 2 "$fn"
train nocloud
check "lambda without a cloud: exit 2" "$rc" 2
check "... at the compute section" \
    "$(grep -c "nocloud.yaml:6:10: error: compute 'lambda' invokes function workers through a cloud" "$tmp/nocloud.err")" 1
exp gated "$gcn" 2 "$fn" "$cloudline" "resilience: [{plugin: staleness}]"
train gated
check "lambda under a task gate: refused, exit 2" \
    "$rc $(grep -c "gated.yaml:8:14: error: resilience 'staleness' gates tasks, which compute 'lambda' does not run under yet" "$tmp/gated.err")" \
    "2 1"
exp fuse-gather "$gcn" 2 "{plugin: lambda, lambdas: 2, fuse: true}" "$cloudline"
train fuse-gather
check "fusion of a model that ends with a gather: refused, exit 2" \
    "$rc $(grep -c "fuse-gather.yaml:6:45: compute.fuse: task fusion runs the model's last stage with the loss, but model 'gcn' ends with graph work (GA1): set model.order: gather_first" "$tmp/fuse-gather.err")" \
    "2 1"
finish
