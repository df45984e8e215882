#!/usr/bin/env bash
# --resume DIR runs DIR/experiment.yaml, the run's own copy (overrides applied, paths
# made absolute), not the live experiment file (issue 18, class 5): a run killed after
# step 25 and resumed after its experiment file was edited (weight_decay 0.1 -> 0.5) ends
# exactly as the uninterrupted run, with a warning naming the file; after the file was
# deleted, the resume works and says nothing but where it resumed. The experiment names
# its text by a relative path and the runs start from another directory than the
# resumes, so the copy's paths must resolve on their own. Environment: see bad_lib.bash
# (BIVOUAC_DATA_DIR must hold tinyshakespeare/).
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC

exp_dir="$tmp/exp"
mkdir -p "$exp_dir" "$tmp/start" "$tmp/elsewhere"
text="$BIVOUAC_DATA_DIR/tinyshakespeare"
[[ -d $text ]] && text="$text/input.txt"
head -c 30000 "$text" >"$exp_dir/input.txt"
exp="$exp_dir/t.yaml"
cat >"$exp" <<'EOF'
model: {plugin: transformer, layers: 2, heads: 2, width: 32}
dataset: {text: input.txt}
train: {steps: 40, batch: 4, block: 16, warmup: 5, eval_interval: 10, eval_iters: 2,
        final_eval_iters: 4, seed: 7, weight_decay: 0.1}
compute: {plugin: cpu, threads: 2}
resilience:
  - {plugin: checkpoint, every: 10, keep: 3}
EOF
exp_real="$(realpath "$exp_dir")/t.yaml"

# start OUT [args]: a run of ../exp/t.yaml from $tmp/start (a relative experiment path),
# with an override that the resume must keep.
start() {
    local out=$1
    shift
    (cd "$tmp/start" && "$B" run ../exp/t.yaml -s train.lr=0.002 --out "$out" --quiet "$@")
}
# killed OUT: the same, SIGKILLed right after step 25 (the subshell keeps bash's
# "Killed" notice out of the output).
killed() {
    local rc=0
    (BIVOUAC_FAULT_KILL_AFTER_EPOCH=25 start "$1" >/dev/null 2>&1; exit $?) 2>/dev/null || rc=$?
    [[ $rc == 137 && ! -e $1/result.json ]] ||
        { echo "FAIL: the run killed after step 25 exited $rc"; exit 1; }
}
# same_as_ref DIR: appends to $why unless DIR ended as the uninterrupted run did.
curve() { sed -E 's/, "seconds": [^}]*//' "$1/metrics.jsonl"; }
fields() {
    python3 - "$1/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
keys = ("experiment", "dataset", "steps", "params_crc32c", "val_loss", "train_loss",
        "last_step_loss", "stop_reason")
print(" ".join(f"{k}={r.get(k)}" for k in keys))
EOF
}
same_as_ref() {
    local ok=0
    if [[ $(fields "$1") != "$(fields "$tmp/ref")" ]]; then
        echo "result.json: $(fields "$1"), expected $(fields "$tmp/ref")" >>"$why"
        ok=1
    fi
    if ! diff <(curve "$tmp/ref") <(curve "$1") >/dev/null; then
        echo "metrics.jsonl differs from the uninterrupted run's" >>"$why"
        ok=1
    fi
    return $ok
}
# The newest checkpoint a killed run had landed: 20, or 10 when the writer had not
# finished step 20's when the kill came. Either way the run must end the same.
stderr_filter='s/^(bivouac: info: resumed after step )(10|20)$/\1N/'

start "$tmp/ref" >/dev/null
killed "$tmp/k1"
killed "$tmp/k2"

t "the copy names the text by an absolute path and keeps the override"
: >"$why"
s=0
grep -qxF "  text: '$tmp/start/../exp/input.txt'" "$tmp/k1/experiment.yaml" ||
    { echo "no absolute text path in $tmp/k1/experiment.yaml" >>"$why"; s=1; }
grep -qx "  lr: 0.002" "$tmp/k1/experiment.yaml" ||
    { echo "no 'lr: 0.002' in $tmp/k1/experiment.yaml" >>"$why"; s=1; }
report $s grep "$tmp/k1/experiment.yaml"

sed -i 's/weight_decay: 0.1/weight_decay: 0.5/' "$exp"

t "the edit matters: a fresh run of the edited file ends elsewhere"
: >"$why"
s=0
start "$tmp/edited" >/dev/null
if [[ $(fields "$tmp/edited") == "$(fields "$tmp/ref")" ]]; then
    echo "weight_decay 0.5 gave the same result as 0.1" >>"$why"
    s=1
fi
report $s start "$tmp/edited"

t "resume after the experiment file was edited: a warning, then the run's own result"
s=0
# shellcheck disable=SC2016 # $1 is the inner shell's
outcome_exit 0 "bivouac: warning: $exp_real changed since the run started; resuming with the run's copy $tmp/k1/experiment.yaml
bivouac: info: resumed after step N" \
    bash -c 'cd "$1/elsewhere" && shift && exec "$@"' _ "$tmp" "$B" run --resume "$tmp/k1" --quiet || s=1
same_as_ref "$tmp/k1" || s=1
report $s "(cd $tmp/elsewhere && $B run --resume $tmp/k1 --quiet)"

rm "$exp"
t "resume after the experiment file was deleted: the run's own result"
s=0
# shellcheck disable=SC2016
outcome_exit 0 "bivouac: info: resumed after step N" \
    bash -c 'cd "$1/elsewhere" && shift && exec "$@"' _ "$tmp" "$B" run --resume "$tmp/k2" --quiet || s=1
same_as_ref "$tmp/k2" || s=1
report $s "(cd $tmp/elsewhere && $B run --resume $tmp/k2 --quiet)"

finish
