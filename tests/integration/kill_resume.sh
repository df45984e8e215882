#!/usr/bin/env bash
# A run killed with SIGKILL and resumed with `bivouac run --resume DIR` ends exactly where an
# uninterrupted run ends: same result.json (wall_seconds and cost aside), same metrics.jsonl
# ("seconds" aside), same weights (params_crc32c). Also when the newest checkpoint is
# damaged (truncated, or one byte flipped): the resume warns and uses the older one. Also
# with policies whose state must survive: early stopping that fires after the kill, and an
# lr schedule. And --resume where there is nothing to resume from fails clearly.
# The kill is BIVOUAC_FAULT_KILL_AFTER_EPOCH=N (core/src/engine/train.c:
# raise(SIGKILL) right after epoch N's checkpoint hand-off). Fixtures: tests/data/resume/.
# Environment (set by ctest): BIVOUAC (the binary), BIVOUAC_DATA_DIR, BIVOUAC_SOURCE_DIR;
# BIVOUAC_CACHE_DIR is honoured (default: a temporary directory).
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fixtures="$BIVOUAC_SOURCE_DIR/tests/data/resume"
unset BIVOUAC_FAULT_KILL_AFTER_EPOCH

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-kill-resume.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR=${BIVOUAC_CACHE_DIR:-$tmp/cache}

passed=0
failed=0
ok() {
    passed=$((passed + 1))
    echo "ok: $*"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*" >&2
}
# Stops the script: later steps depend on this one.
fatal() {
    fail "$*"
    echo "$passed passed, $failed failed"
    exit 1
}

# bv LOG ARGS...: runs bivouac with stdout/stderr in LOG.out/LOG.err; sets $rc.
bv() {
    local log=$1
    shift
    rc=0
    "$BIVOUAC" "$@" >"$log.out" 2>"$log.err" || rc=$?
}

# train EXP OUT: an uninterrupted run that must succeed.
train() {
    bv "$2" run "$1" --out "$2" --quiet
    [[ $rc == 0 ]] || { cat "$2.err" >&2; fatal "bivouac run $1 exited $rc"; }
}

# killed EXP OUT EPOCH: a run killed right after EPOCH; it must die of SIGKILL (status 137)
# having written the metrics of EPOCH epochs. The subshell keeps bash's "Killed" notice
# out of the test's output (`exit $?` keeps bash from exec'ing the command in place of the
# subshell, which would make the notice ours again).
killed() {
    local exp=$1 out=$2 epoch=$3
    rc=0
    (
        BIVOUAC_FAULT_KILL_AFTER_EPOCH=$epoch "$BIVOUAC" run "$exp" --out "$out" --quiet \
            >"$out.out" 2>"$out.err"
        exit $?
    ) 2>/dev/null || rc=$?
    local lines
    lines=$(wc -l <"$out/metrics.jsonl" 2>/dev/null || echo none)
    if [[ $rc == 137 && $lines == "$epoch" ]]; then
        ok "$(basename "$out"): killed after epoch $epoch (exit 137, $lines metrics lines)"
    else
        cat "$out.err" >&2
        fatal "$(basename "$out"): expected exit 137 with $epoch metrics lines after" \
            "BIVOUAC_FAULT_KILL_AFTER_EPOCH=$epoch, got exit $rc and $lines lines"
    fi
}

# resume DIR: --resume must succeed; sets $resumed_after from its log.
resume() {
    bv "$1.resume" run --resume "$1" --quiet
    [[ $rc == 0 ]] || { cat "$1.resume.err" >&2; fatal "bivouac run --resume $1 exited $rc"; }
    resumed_after=$(sed -n 's/^bivouac: info: resumed after epoch \([0-9]*\)$/\1/p' "$1.resume.err")
}

strip_metrics() { sed -E 's/, "seconds": [^,}]+//; s/, "cost_usd": [^,}]+//' "$1"; }
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# checkpoints DIR: the checkpoint files in DIR/checkpoints, oldest first, on one line.
checkpoints() {
    local f names=()
    for f in "$1"/checkpoints/ckpt-*.bvck; do
        [[ -e $f ]] && names+=("${f##*/}")
    done
    echo "${names[*]:-}"
}

# same_as LABEL REF DIR: DIR ended exactly as the uninterrupted REF did.
same_as() {
    local label=$1 ref=$2 dir=$3 diffs
    diffs=$(python3 - "$ref/result.json" "$dir/result.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for r in (a, b):  # times and memory, and the cost and value that follow from them
    for k in ("wall_seconds", "load_seconds", "peak_rss_mb", "cost_usd", "value",
              "cost_breakdown"):
        r.pop(k, None)
keys = ("test_accuracy", "best_val_accuracy", "epochs", "params_crc32c", "stop_reason")
out = [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
out += [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b))
        if k not in keys and a.get(k) != b.get(k)]
print("; ".join(out))
EOF
    )
    if [[ -z $diffs ]]; then
        ok "$label: result.json as uninterrupted (epochs $(field "$dir/result.json" epochs)," \
            "test $(field "$dir/result.json" test_accuracy), crc $(field "$dir/result.json" params_crc32c))"
    else
        fail "$label: result.json differs from the uninterrupted run's: $diffs"
    fi
    if cmp -s <(strip_metrics "$ref/metrics.jsonl") <(strip_metrics "$dir/metrics.jsonl"); then
        ok "$label: metrics.jsonl as uninterrupted (but for \"seconds\")"
    else
        fail "$label: metrics.jsonl differs from the uninterrupted run's"
        diff <(strip_metrics "$ref/metrics.jsonl") <(strip_metrics "$dir/metrics.jsonl") | head -6 >&2 || true
    fi
}

expect_resumed_after() {
    if [[ $resumed_after == "$2" ]]; then
        ok "$1: resumed after epoch $2"
    else
        fail "$1: expected 'bivouac: info: resumed after epoch $2', got '${resumed_after:-nothing}'"
    fi
}

# ---- (a, b) kill after epoch 23 of 60 (checkpoints every 5, keep 2), resume ----
exp="$fixtures/gcn-cora-ckpt.yaml"
train "$exp" "$tmp/a"
if [[ $(field "$tmp/a/result.json" epochs) == 60 &&
    $(field "$tmp/a/result.json" stop_reason) == "reached 60 epochs" ]]; then
    ok "uninterrupted run: 60 epochs, 'reached 60 epochs'"
else
    fail "uninterrupted run: expected 60 epochs and 'reached 60 epochs', got" \
        "$(field "$tmp/a/result.json" epochs) and '$(field "$tmp/a/result.json" stop_reason)'"
fi
if [[ $(checkpoints "$tmp/a") == "ckpt-00000055.bvck ckpt-00000060.bvck" ]]; then
    ok "uninterrupted run keeps the newest 2 checkpoints"
else
    fail "uninterrupted run: expected checkpoints 55 and 60, got '$(checkpoints "$tmp/a")'"
fi

killed "$exp" "$tmp/b" 23
# ckpt-20 was handed to the writer 3 epochs before the kill. On a loaded machine (or under
# ASan) the writer may not have landed it yet, and then ckpt-15 is the newest: either way
# the resumed run must end exactly like the uninterrupted one. (Whether the writer had yet
# deleted an older one is a race too, so that is not asserted.)
have=" $(checkpoints "$tmp/b") "
read -r -a ckpts <<<"$have"
newest=${ckpts[-1]:-none}
older=${ckpts[-2]:-none}
epoch_of() { local n=${1#ckpt-}; n=${n%.bvck}; echo $((10#$n)); }
if [[ ($newest == ckpt-00000020.bvck && $older == ckpt-00000015.bvck) ||
      ($newest == ckpt-00000015.bvck && $older == ckpt-00000010.bvck) ]]; then
    ok "killed run left $older and $newest (and nothing newer)"
else
    fatal "killed run: expected ckpt-20 (or, if its write had not landed, ckpt-15) newest" \
        "with the one before it, got '$have'"
fi
newest_epoch=$(epoch_of "$newest")
older_epoch=$(epoch_of "$older")
for damage in truncated flipped; do
    cp -a "$tmp/b" "$tmp/b-$damage"
done
resume "$tmp/b"
expect_resumed_after "resume" "$newest_epoch"
same_as "kill after 23 + resume" "$tmp/a" "$tmp/b"
if [[ $(checkpoints "$tmp/b") == "ckpt-00000055.bvck ckpt-00000060.bvck" ]]; then
    ok "resumed run ends with the newest 2 checkpoints"
else
    fail "resumed run: expected checkpoints 55 and 60, got '$(checkpoints "$tmp/b")'"
fi
# Resuming a finished run trains nothing and ends the same again.
resume "$tmp/b"
expect_resumed_after "resume of the finished run" 60
same_as "resume of the finished run" "$tmp/a" "$tmp/b"

# ---- (c) the newest checkpoint is damaged: warn, use the one before, end the same ----
truncate -s 1000 "$tmp/b-truncated/checkpoints/$newest"
python3 - "$tmp/b-flipped/checkpoints/$newest" <<'EOF'
import os, sys
path = sys.argv[1]
middle = os.path.getsize(path) // 2
with open(path, "r+b") as f:
    f.seek(middle)
    byte = f.read(1)[0]
    f.seek(middle)
    f.write(bytes([byte ^ 0x5a]))
EOF
for damage in truncated flipped; do
    dir="$tmp/b-$damage"
    resume "$dir"
    warning="bivouac: warning: checkpoint $dir/checkpoints/$newest is damaged ("
    line=$(grep -F -- "$warning" "$dir.resume.err" || true)
    if [[ $line == "$warning"*"); using an older one" && $(grep -c 'is damaged' "$dir.resume.err") == 1 ]]; then
        ok "$damage: warned once: ${line#bivouac: warning: }"
    else
        fail "$damage: expected one '${warning}...); using an older one' on stderr, got:" \
            "$(cat "$dir.resume.err")"
    fi
    expect_resumed_after "$damage" "$older_epoch"
    same_as "$damage newest checkpoint + resume" "$tmp/a" "$dir"
done

# ---- (d) early stopping (patience 4) fires after the kill point ----
exp="$fixtures/gcn-cora-ckpt-early-stop.yaml"
train "$exp" "$tmp/es"
stop_epoch=$(field "$tmp/es/result.json" epochs)
stop_reason=$(field "$tmp/es/result.json" stop_reason)
if [[ $stop_reason == "policy: early stopping: val_loss has not improved for 4 epochs"* &&
    $stop_epoch -ge 12 && $stop_epoch -lt 200 ]]; then
    ok "early-stopping run stops at epoch $stop_epoch: $stop_reason"
else
    fatal "early-stopping run: expected an early stop between epochs 12 and 199, got epoch" \
        "$stop_epoch, '$stop_reason' (tests/data/resume/gcn-cora-ckpt-early-stop.yaml no longer fits)"
fi
# Kill 1 and 3 epochs before the stop. With today's numbers (stop at 32, best val_loss at
# 28) these resume from ckpt-30, inside the run of epochs without improvement, so the
# policy's counter must be rebuilt as 2 by the replay (or from ckpt-25 if the writer had
# not landed ckpt-30 yet when the kill came: the outcome must be the same), and from
# ckpt-25, before that run.
for before in 1 3; do
    kill_at=$((stop_epoch - before))
    dir="$tmp/es-kill$kill_at"
    killed "$exp" "$dir" "$kill_at"
    resume "$dir"
    echo "   (resumed after epoch ${resumed_after:-?})"
    same_as "early stop, kill after $kill_at + resume" "$tmp/es" "$dir"
done

# ---- lr schedule: a policy halving the lr every 7 epochs, killed after 23 of 25 ----
exp="$fixtures/gcn-cora-ckpt-lr.yaml"
train "$exp" "$tmp/lr"
lrs=$(python3 -c 'import json, sys; print(" ".join(sorted({str(json.loads(l)["lr"]) for l in open(sys.argv[1])}, key=float, reverse=True)))' "$tmp/lr/metrics.jsonl")
if [[ $lrs == "0.05 0.025 0.0125 0.00625" ]]; then
    ok "lr schedule run: lr $lrs"
else
    fail "lr schedule run: expected lr 0.05 0.025 0.0125 0.00625, got '$lrs'"
fi
killed "$exp" "$tmp/lr-kill" 23
# as in (a, b): under load ckpt-20 may not have landed before the kill, and then the
# resume starts from ckpt-15; it must end the same either way
lr_newest=$(checkpoints "$tmp/lr-kill")
lr_newest=${lr_newest##* }
resume "$tmp/lr-kill"
if [[ $lr_newest == ckpt-00000020.bvck ]]; then
    expect_resumed_after "lr schedule" 20
else
    expect_resumed_after "lr schedule (ckpt-20 had not landed: $lr_newest)" 15
fi
same_as "lr schedule, kill after 23 + resume" "$tmp/lr" "$tmp/lr-kill"

# ---- (e) --resume with nothing to resume from ----
# A run killed before its first checkpoint (every 5): the directory has run.yaml but no
# checkpoint. The error names the directory, and the metrics of the killed run stay.
exp="$fixtures/gcn-cora-ckpt.yaml"
killed "$exp" "$tmp/early" 3
bv "$tmp/early.resume" run --resume "$tmp/early" --quiet
expected="bivouac: error: no usable checkpoint in $tmp/early/checkpoints"
if [[ $rc == 1 && $(cat "$tmp/early.resume.err") == "$expected" &&
    $(wc -l <"$tmp/early/metrics.jsonl") == 3 && ! -e $tmp/early/result.json ]]; then
    ok "no checkpoint yet: exit 1, '$expected', metrics.jsonl kept"
else
    fail "no checkpoint yet: expected exit 1 and '$expected', metrics.jsonl kept; got exit" \
        "$rc, '$(cat "$tmp/early.resume.err")', $(wc -l <"$tmp/early/metrics.jsonl") metrics lines"
fi

# A finished run without a resilience strategy.
mkdir "$tmp/plain"
bv "$tmp/plain" run "$BIVOUAC_SOURCE_DIR/configs/gcn-cora.yaml" -s train.epochs=2 --out "$tmp/plain" --quiet
[[ $rc == 0 ]] || { cat "$tmp/plain.err" >&2; fatal "2-epoch gcn-cora run exited $rc"; }
bv "$tmp/plain.resume" run --resume "$tmp/plain" --quiet
expected="bivouac: error: --resume needs a resilience strategy that keeps state, e.g. resilience: [{plugin: checkpoint}]"
if [[ $rc == 2 && $(cat "$tmp/plain.resume.err") == "$expected" ]]; then
    ok "no resilience strategy: exit 2, '$expected'"
else
    fail "no resilience strategy: expected exit 2 and '$expected'; got exit $rc," \
        "'$(cat "$tmp/plain.resume.err")'"
fi

# A directory that is not a run directory at all (no run.yaml).
mkdir "$tmp/empty"
bv "$tmp/empty.resume" run --resume "$tmp/empty" --quiet
expected="bivouac: error: $tmp/empty is not a bivouac run directory"
if [[ $rc == 2 && $(tail -n 1 "$tmp/empty.resume.err") == "$expected" ]]; then
    ok "not a run directory: exit 2, '$expected'"
else
    fail "not a run directory: expected exit 2 and '$expected' last; got exit $rc," \
        "'$(cat "$tmp/empty.resume.err")'"
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
