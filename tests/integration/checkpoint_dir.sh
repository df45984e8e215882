#!/usr/bin/env bash
# Odd things in a checkpoint directory, and a checkpoint cadence the engine cannot keep
# (issue 18, class 8), each with its exact outcome: a FIFO named like the newest
# checkpoint is skipped with a warning instead of hanging the resume; so is a directory of
# that name; a directory where a checkpoint must be written fails the run with one error
# (it was printed twice); and a transformer's checkpoint `every` that does not divide
# train.eval_interval (its state is offered only at evaluations, so no checkpoint was
# ever written) is an error of `check` and `run` at the position of `every`.
# Environment: see bad_lib.bash (BIVOUAC_DATA_DIR must hold tinyshakespeare/).
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
tiny="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
# Every bivouac below runs under timeout: a hang (the FIFO) fails the check, it does not
# hang the test, and nothing outlives it.
bv() { timeout -k 5 120 "$B" "$@"; }

# listing DIR: its entries, hidden ones too, on one line.
listing() { (cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' '); }

# dir_is LISTING DIR: appends to $why unless DIR holds exactly LISTING.
dir_is() {
    local got
    got=$(listing "$2")
    if [[ $got != "$1" ]]; then
        echo "$2 holds '$got', expected '$1'" >>"$why"
        return 1
    fi
}

# A finished 40-step run: checkpoints 20, 30 and 40 (every 10, keep 3).
done_run="$tmp/done"
bv run "$tiny" --out "$done_run" --quiet >/dev/null

for kind in fifo directory; do
    t "a $kind named like the newest checkpoint is skipped with a warning on --resume"
    dir="$tmp/$kind"
    cp -a "$done_run" "$dir"
    odd="$dir/checkpoints/ckpt-00000050.bvck"
    if [[ $kind == fifo ]]; then mkfifo "$odd"; else mkdir "$odd"; fi
    s=0
    outcome_exit 0 "bivouac: warning: checkpoint $odd is not a regular file; using an older one
bivouac: info: resumed after step 40" bv run --resume "$dir" --quiet || s=1
    # the resume trains nothing more; it wrote step 40's checkpoint again, left the odd
    # entry alone, and let go of its lock
    dir_is "ckpt-00000020.bvck ckpt-00000030.bvck ckpt-00000040.bvck ckpt-00000050.bvck " \
        "$dir/checkpoints" || s=1
    dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl result.json run.yaml " "$dir" || s=1
    report $s bivouac run --resume "$dir" --quiet
done

t "a directory where a checkpoint must go fails the run with one error"
ck="$tmp/ck"
mkdir -p "$ck/ckpt-00000020.bvck"
out="$tmp/in-the-way"
s=0
# step 20's write fails in the background; step 30's checkpoint waits for it and reports it
outcome_fail 1 "bivouac: error: checkpoint of epoch 20 was not written: $ck/ckpt-00000020.bvck is a directory, not a checkpoint file" \
    bv run "$tiny" -s "resilience.0.dir=$ck" --out "$out" --quiet || s=1
# step 30's own checkpoint still went through
dir_is "ckpt-00000010.bvck ckpt-00000020.bvck ckpt-00000030.bvck " "$ck" || s=1
dir_is "experiment.yaml metrics.jsonl run.yaml " "$out" || s=1
report $s bivouac run "$tiny" -s "resilience.0.dir=$ck" --out "$out" --quiet

# An experiment whose checkpoint `every` (7) does not divide eval_interval (10).
every7="$tmp/every7.yaml"
cat >"$every7" <<'EOF'
model: {plugin: transformer, layers: 2, heads: 2, width: 32}
dataset: {name: tinyshakespeare}
train: {steps: 40, batch: 4, block: 16, warmup: 5, eval_interval: 10, eval_iters: 2,
        final_eval_iters: 4, seed: 7}
compute: {plugin: cpu, threads: 2}
resilience:
  - plugin: checkpoint
    every: 7
EOF
msg="checkpoint 'every' (7) must divide train.eval_interval (10): the engine offers its state only at evaluations"

t "check: 'every' that does not divide eval_interval is an error at 'every'"
expect_fail 2 "$every7:8:12: error: $msg
$every7: 1 error" bv check "$every7"

t "run: the same error, and nothing is written"
expect_run_fail 2 "$every7:8:12: error: $msg" "$every7"

t "check: the default every (10) against eval_interval 25 is reported at the strategy"
default="$tmp/default-every.yaml"
sed -e 's/eval_interval: 10/eval_interval: 25/' -e '/every: 7/d' "$every7" >"$default"
expect_fail 2 "$default:7:5: error: checkpoint 'every' (10) must divide train.eval_interval (25): the engine offers its state only at evaluations
$default: 1 error" bv check "$default"

t "check: every (5) that divides eval_interval (10) is fine"
expect_exit 0 "" bv check "$every7" -s resilience.0.every=5

finish
