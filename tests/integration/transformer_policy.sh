#!/usr/bin/env bash
# Lua policies steer a transformer run as they steer a graph run (issue 10): on_step_end
# after every step and on_eval_end after every evaluation, with the same actions. A policy
# that stops at step 12 ends the run there (the final evaluation still runs); one that
# stops at the first evaluation ends it at step 10; one that sets the learning rate after
# step 20 changes exactly the steps after it; and a run with that policy killed after step
# 25 and resumed ends with the uninterrupted run's loss curve and weights (the rate a
# policy set is part of the checkpoint).
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/policy.yaml"
plain="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-tf-policy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR="$tmp/cache"
# check, field, finish and the counters
# shellcheck source=tests/integration/check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
steps_of() { grep -c '"train_loss"' "$1/metrics.jsonl"; }
curve() { sed -e 's/, "seconds": [^}]*//' "$1/metrics.jsonl"; }
# lr of the step lines from FIRST to LAST, one per line
lrs() { grep '"train_loss"' "$1/metrics.jsonl" | sed -n "$2,$3p" | grep -o '"lr": [^,]*' | sort -u; }

# 1. on_step_end stops after step 12
"$BIVOUAC" run "$exp" -s policy.params.at=12 --out "$tmp/stop" --quiet >"$tmp/stop.out"
check "step policy: steps in result.json" "$(field "$tmp/stop" steps)" '"steps": 12'
check "step policy: stop_reason" "$(field "$tmp/stop" stop_reason)" '"stop_reason": "policy: step 12"'
check "step policy: step lines in metrics.jsonl" "$(steps_of "$tmp/stop")" 12
check "step policy: evaluations (step 10, final at 12)" \
    "$(grep -o '"step": [0-9]*, "eval_train_loss"' "$tmp/stop/metrics.jsonl" | tr '\n' ' ')" \
    '"step": 10, "eval_train_loss" "step": 12, "eval_train_loss" '
check "step policy: summary line" "$(grep -c 'after 12 steps' "$tmp/stop.out")" 1

# 2. on_eval_end stops at the first evaluation
"$BIVOUAC" run "$exp" -s policy.params.val_above=0 --out "$tmp/eval" --quiet >/dev/null
check "eval policy: steps" "$(field "$tmp/eval" steps)" '"steps": 10'
check "eval policy: stop_reason" "$(field "$tmp/eval" stop_reason | sed -E 's/[0-9]+\.[0-9]+/X/')" \
    '"stop_reason": "policy: val_loss X at step 10"'

# 3. the learning rate set after step 20 applies to steps 21..40 only
"$BIVOUAC" run "$plain" --out "$tmp/plain" --quiet >/dev/null
lr_exp=(-s "policy.file=$BIVOUAC_SOURCE_DIR/tests/data/transformer/policy_lr.lua"
    -s policy.params.at=20 -s policy.params.lr=0.0005)
"$BIVOUAC" run "$exp" "${lr_exp[@]}" --out "$tmp/lr" --quiet >/dev/null
check "lr policy: steps 21-40 train with lr 0.0005" "$(lrs "$tmp/lr" 21 40)" '"lr": 0.0005'
check "lr policy: step 20 still has the schedule's rate" \
    "$(lrs "$tmp/lr" 20 20)" "$(lrs "$tmp/plain" 20 20)"
check "lr policy: steps 1-20 as without the policy" \
    "$(curve "$tmp/lr" | head -22 | md5sum)" "$(curve "$tmp/plain" | head -22 | md5sum)"
if [ "$(field "$tmp/lr" params_crc32c)" != "$(field "$tmp/plain" params_crc32c)" ]; then
    echo "ok: lr policy: other final weights than without it"
    passed=$((passed + 1))
else
    echo "FAIL: lr policy: the same weights as without it" >&2
    failed=$((failed + 1))
fi

# 4. killed after step 25 and resumed: the uninterrupted run's curve and weights
set +e
BIVOUAC_FAULT_KILL_AFTER_EPOCH=25 "$BIVOUAC" run "$exp" "${lr_exp[@]}" --out "$tmp/killed" \
    --quiet >/dev/null 2>&1
code=$?
set -e
check "lr policy: the fault-injected run is killed" "$code" 137
"$BIVOUAC" run --resume "$tmp/killed" --quiet >/dev/null 2>&1
check "lr policy, resumed: loss curve" "$(curve "$tmp/killed" | md5sum)" "$(curve "$tmp/lr" | md5sum)"
check "lr policy, resumed: weights" "$(field "$tmp/killed" params_crc32c)" \
    "$(field "$tmp/lr" params_crc32c)"

finish
