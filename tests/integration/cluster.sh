#!/usr/bin/env bash
# Roles as processes (`cluster:` on `cloud: {plugin: local}`, docs/cluster.md):
#  - GCN and GAT on Cora, with 2 tensor workers and 2 parameter servers, end with
#    bit-identical weights and the same accuracies as the one-process run (the same seed),
#    with the graph server's arrays in shared memory (the default) and in messages;
#  - on 2 graph servers (each its part of the graph), without dropout, the losses of the
#    one-process run to 1e-6;
#  - SIGKILL of any role of a G = P = T = 2 run at a seeded random point (3 per role kind): exit
#    status 1 within a bound, the lost role named, no process of the run left (its process
#    group), no socket file or directory left; then --resume from the checkpoint ends with
#    the weights of the uninterrupted run;
#  - SIGKILL of the coordinator: the roles end too and clean up after themselves;
#  - Ctrl-C (SIGINT to the process group): exit 1, "interrupted", nothing left;
#  - a role whose set-up fails: its error reaches the user, and its own output arrives
#    prefixed with its name.
# Environment (set by ctest): BIVOUAC, BIVOUAC_DATA_DIR; BIVOUAC_CACHE_DIR is honoured.
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"

procs_setup cluster # $tmp; the runs' socket directories in $TMPDIR
export BIVOUAC_CACHE_DIR=${BIVOUAC_CACHE_DIR:-$tmp/cache}

cat >"$tmp/gcn.yaml" <<'EOF'
name: gcn-cluster
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {name: cora, normalize_features: true}
train: {epochs: 40, lr: 0.01, weight_decay: 5e-4, seed: 3}
compute: {plugin: cpu, threads: 1}
EOF
cat >"$tmp/gat.yaml" <<'EOF'
name: gat-cluster
model: {plugin: gat, layers: 2, heads: 8, hidden: 64, out_heads: 1, dropout: 0.6, attn_dropout: 0.6}
dataset: {name: cora, normalize_features: true}
train: {epochs: 4, lr: 0.005, weight_decay: 5e-4, seed: 3}
compute: {plugin: cpu, threads: 1}
engine: {intervals: 3}
EOF
procs=(-s 'cloud={plugin: local}' -s 'cluster={tensor_workers: 2, param_servers: 2}')


# ---- same weights and accuracies as the one-process run ----
for m in gcn gat; do
    run "$tmp/$m-one" run "$tmp/$m.yaml" --out "$tmp/$m-one" --quiet
    check "$m: one-process run exits 0" "$rc" 0
    run "$tmp/$m-procs" run "$tmp/$m.yaml" --out "$tmp/$m-procs" --quiet "${procs[@]}"
    check "$m: run on 5 processes exits 0" "$rc" 0
    [ "$rc" = 0 ] || cat "$tmp/$m-procs.err" >&2
    for f in params_crc32c test_accuracy val_accuracy train_loss; do
        check "$m: $f as in one process" "$(field "$tmp/$m-procs" $f)" "$(field "$tmp/$m-one" $f)"
    done
    check "$m: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
done
# the roles above share the graph server's stage arrays through memory (links over ipc);
# without engine.share_arrays they travel in the messages, to the same bits
run "$tmp/gcn-copies" run "$tmp/gcn.yaml" --out "$tmp/gcn-copies" --quiet "${procs[@]}" \
    -s engine.share_arrays=false
check "gcn, arrays in messages: exits 0" "$rc" 0
check "gcn, arrays in messages: params_crc32c as in one process" \
    "$(field "$tmp/gcn-copies" params_crc32c)" "$(field "$tmp/gcn-one" params_crc32c)"
check "gcn, arrays in messages: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# ---- two graph servers, each with its part of the graph and its ghosts ----
# Without dropout the parts compute what the whole graph does, up to the order of the
# floating-point sums: the losses agree with the one-process run's to 1e-6.
close() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print("yes" if abs(a - b) <= 1e-6 * max(1, abs(b)) else f"no: {a} vs {b}")' "$1" "$2"; }
last() { grep '"train_loss"' "$1/metrics.jsonl" | tail -1 | python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
for m in gcn gat; do
    nodrop=(-s model.dropout=0)
    [ $m = gat ] && nodrop+=(-s model.attn_dropout=0)
    run "$tmp/$m-one0" run "$tmp/$m.yaml" --out "$tmp/$m-one0" --quiet "${nodrop[@]}"
    run "$tmp/$m-g2" run "$tmp/$m.yaml" --out "$tmp/$m-g2" --quiet "${nodrop[@]}" \
        -s 'cloud={plugin: local}' -s 'cluster={graph_servers: 2, param_servers: 2, tensor_workers: 2}'
    check "$m on 2 graph servers: exits 0" "$rc" 0
    [ "$rc" = 0 ] || cat "$tmp/$m-g2.err" >&2
    for f in train_loss val_loss test_loss; do
        check "$m on 2 graph servers: last $f as in one process" \
            "$(close "$(last "$tmp/$m-g2" $f)" "$(last "$tmp/$m-one0" $f)")" yes
    done
    check "$m on 2 graph servers: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
done

# ---- SIGKILL of a role at a seeded random point ----
cat >"$tmp/long.yaml" <<'EOF'
name: gcn-cluster-long
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {name: cora, normalize_features: true}
train: {epochs: 300, lr: 0.01, weight_decay: 5e-4, seed: 7}
compute: {plugin: cpu, threads: 1}
engine: {intervals: 4}
resilience: [{plugin: checkpoint, every: 5, keep: 2}]
cluster: {graph_servers: 2, tensor_workers: 2, param_servers: 2}
cloud: {plugin: local}
EOF
run "$tmp/ref" run "$tmp/long.yaml" --out "$tmp/ref" --quiet
check "uninterrupted cluster run exits 0" "$rc" 0
ref_crc=$(field "$tmp/ref" params_crc32c)
# 2 graph servers x 4 intervals x 2 weight stages = 16 gradient messages an epoch, each to
# the least-loaded of the 2 parameter servers (psK_gradients in metrics.jsonl): every
# epoch they take all 16 between them, and over the run each takes some
fewest=$(field "$tmp/ref" param_server_intervals_fewest) && fewest=${fewest##*: }
most=$(field "$tmp/ref" param_server_intervals_most) && most=${most##*: }
check "the parameter servers took all 16 gradient messages" "$((fewest + most))" 16
check "every epoch, the servers' messages add up to 16" "$(python3 - "$tmp/ref/metrics.jsonl" <<'PY'
import collections, json, sys
per = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("series", "").endswith("_gradients"):
        per[r["epoch"]][r["series"]] = r["value"]
bad = [e for e, s in per.items() if len(s) != 2 or sum(s.values()) != 16]
totals = [sum(s.get(f"ps{k}_gradients", 0) for s in per.values()) for k in range(2)]
print("yes" if len(per) == 300 and not bad and min(totals) > 0 else f"no: {len(per)} epochs, bad {bad[:3]}, totals {totals}")
PY
)" yes

RANDOM=11 # seeded: the same kill points every time
declare -A names=([graph]="graph server 1" [param]="parameter server 1" [tensor]="tensor worker 1")
declare -A pattern=([graph]="--role graph --index 1 " [param]="--role param --index 1 "
    [tensor]="--role tensor --index 1 ")
for role in graph param tensor; do
    for point in 1 2 3; do
        label="kill $role #$point"
        out="$tmp/k-$role-$point"
        after=$((5 + RANDOM % 40)) # epochs done before the kill
        delay_ms=$((RANDOM % 4))   # and then into the next epoch
        (run "$out" run "$tmp/long.yaml" --out "$out" --quiet; echo "$rc" >"$out.rc") &
        waiter=$!
        until [ -s "$out.pgid" ]; do sleep 0.01; done
        g=$(cat "$out.pgid")
        groups+=("$g")
        for _ in $(seq 3000); do # up to 30 s for the run to get there
            lines=0
            [ -f "$out/metrics.jsonl" ] && lines=$(grep -c '"train_loss"' "$out/metrics.jsonl" || true)
            [ "$lines" -ge "$after" ] && break
            sleep 0.01
        done
        sleep "0.00$delay_ms"
        pkill -KILL -g "$g" -f -- "${pattern[$role]}" || true
        t0=$(date +%s%N)
        wait "$waiter" || true
        took_ms=$((($(date +%s%N) - t0) / 1000000))
        check "$label (after epoch $after): exit status" "$(cat "$out.rc")" 1
        check "$label: names the lost role" \
            "$(grep -c "^bivouac: error: lost the ${names[$role]} (node [0-9]* on localhost): it was killed by signal 9" "$out.err")" 1
        check "$label: ends within 5 s" "$([ "$took_ms" -lt 5000 ] && echo yes || echo "no ($took_ms ms)")" yes
        check "$label: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"
        if [ "$point" = 1 ]; then
            run "$out.resume" run --resume "$out" --quiet
            check "$label: --resume exits 0" "$rc" 0
            check "$label: --resume ends with the uninterrupted weights" \
                "$(field "$out" params_crc32c)" "$ref_crc"
        fi
    done
done

# ---- --repeat: each seed's roles load the run's one copy of the experiment ----
run "$tmp/rep" run "$tmp/gcn.yaml" --out "$tmp/rep" --quiet --repeat 2 -s train.epochs=5 "${procs[@]}"
check "--repeat 2 on a cluster exits 0" "$rc" 0
check "--repeat 2 on a cluster: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# ---- SIGKILL of the coordinator: the roles end and clean up ----
out="$tmp/kcoord"
(run "$out" run "$tmp/long.yaml" --out "$out" --quiet) 2>/dev/null & # no "Killed" notice
waiter=$!
until [ -s "$out/metrics.jsonl" ]; do sleep 0.01; done
g=$(cat "$out.pgid")
groups+=("$g")
kill -KILL "$g" # the coordinator is the group's leader
wait "$waiter" || true
check "coordinator killed: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# ---- Ctrl-C ----
out="$tmp/int"
(run "$out" run "$tmp/long.yaml" --out "$out" --quiet -s train.epochs=100000; echo "$rc" >"$out.rc") &
waiter=$!
until [ -s "$out/metrics.jsonl" ]; do sleep 0.01; done
g=$(cat "$out.pgid")
groups+=("$g")
kill -INT -- "-$g" # what a terminal sends to its foreground group
wait "$waiter" || true
check "Ctrl-C: exit status" "$(cat "$out.rc")" 1
check "Ctrl-C: says so" "$(grep -c '^bivouac: error: interrupted (Interrupt): stopping the roles' "$out.err")" 1
check "Ctrl-C: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# ---- a role's set-up fails: its words reach the user, prefixed with its name ----
BIVOUAC_FAULT_ROLE_SETUP="tensor worker 1" run "$tmp/setup" run "$tmp/gcn.yaml" \
    --out "$tmp/setup" --quiet "${procs[@]}"
check "set-up failure: exit status" "$rc" 1
check "set-up failure: the coordinator reports it" \
    "$(grep -c '^bivouac: error: tensor worker 1: set-up failed (injected fault)$' "$tmp/setup.err")" 1
check "set-up failure: the role's own output, prefixed" \
    "$(grep -c '^\[tensor worker 1\] bivouac: error: the role failed' "$tmp/setup.err")" 1
check "set-up failure: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

finish
