#!/usr/bin/env bash
# Broken Lua policies: with policy.on_error: continue the run warns with script:line and
# finishes without the policy (exit 0); with on_error: stop it ends with exit 1 and the
# reason in result.json; a backtracking pattern ends with the budget error instead of
# hanging `check` and `run`. Fixtures: tests/data/experiments/policy_*.{yaml,lua}.
# Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
n=0

# run_policy CODE "stderr" EXP: runs EXP into a fresh $out and checks exit and stderr.
run_policy() {
    n=$((n + 1))
    out="$tmp/out-$n"
    expect_exit "$1" "$2" "$B" run "$3" --out "$out" --quiet
}

# result_is "epochs" "stop_reason": what $out/result.json says.
result_is() {
    : >"$why"
    local s=0 got
    if ! got=$(jq -r '"\(.epochs) \(.stop_reason)"' "$out/result.json" 2>&1); then
        echo "cannot read $out/result.json: $got" >>"$why"
        s=1
    elif [[ $got != "$1 $2" ]]; then
        printf 'result.json says epochs %s\n  expected epochs %s, stop_reason "%s"\n' \
            "$got" "$1" "$2" >>"$why"
        s=1
    fi
    report $s jq . "$out/result.json"
}

warn="the run goes on without the policy"

t "syntax error, on_error continue: warns with script:line, exit 0"
lua="$EXP/policy_syntax.lua"
msg="$lua:4: '}' expected (to close '{' at line 3) near 'end'"
run_policy 0 "bivouac: warning: $msg; $warn" "$EXP/policy_syntax.yaml"
t "syntax error, on_error continue: all epochs run"
result_is 2 "reached 2 epochs"

t "endless loop in on_epoch_end, on_error continue: budget warning with script:line, exit 0"
lua="$EXP/policy_loop.lua"
loop="$lua:3: instruction budget of 10000000 exceeded in on_epoch_end"
run_policy 0 "bivouac: warning: $loop; $warn" "$EXP/policy_loop.yaml"
t "endless loop, on_error continue: all epochs run"
result_is 2 "reached 2 epochs"

t "runtime error in on_epoch_end, on_error continue: warns with script:line, exit 0"
lua="$EXP/policy_runtime.lua"
boom="$lua:3: no metric called val_f1"
run_policy 0 "bivouac: warning: $boom; $warn" "$EXP/policy_runtime.yaml"
t "runtime error, on_error continue: all epochs run"
result_is 2 "reached 2 epochs"

t "endless loop, on_error stop: exit 1 after the first epoch"
run_policy 1 "bivouac: error: run stopped: policy error: $loop" "$EXP/policy_loop_stop.yaml"
t "endless loop, on_error stop: result.json has the epoch done and the reason"
result_is 1 "policy error: $loop"

t "runtime error, on_error stop: exit 1 after the first epoch"
run_policy 1 "bivouac: error: run stopped: policy error: $boom" "$EXP/policy_runtime_stop.yaml"
t "runtime error, on_error stop: result.json has the epoch done and the reason"
result_is 1 "policy error: $boom"

t "syntax error, on_error stop: exit 2 (bad input) and nothing written"
expect_run_fail 2 "$EXP/policy_syntax_stop.yaml:5:16: error: $EXP/policy_syntax.lua:4: '}' expected (to close '{' at line 3) near 'end'" \
    "$EXP/policy_syntax_stop.yaml"

t "syntax error, on_error stop: bivouac check reports it"
# Exit 2 with an error naming the script's line 4; the message's wording is the fix's.
check_rejects() {
    : >"$why"
    capture "$B" check "$1"
    if [[ $rc != 2 ]] || ! grep -q "policy_syntax.lua:4" "$tmp/stderr"; then
        echo "exit status $rc, expected 2 with an error at policy_syntax.lua:4; got:" >>"$why"
        sed 's/^/  | /' "$tmp/stdout" "$tmp/stderr" >>"$why"
        return 1
    fi
}
s=0
check_rejects "$EXP/policy_syntax_stop.yaml" || s=1
report $s "$B check $EXP/policy_syntax_stop.yaml"

t "backtracking pattern in set-up, on_error stop: check ends with the budget error, exit 2"
f="$EXP/policy_backtrack_stop.yaml"
bt="$f:5:16: error: $EXP/policy_backtrack.lua:3: instruction budget of 10000000 exceeded in set-up"
expect_fail 2 "$bt
$f: 1 error" "$B" check "$f"
t "backtracking pattern in set-up, on_error stop: run exits 2 and writes nothing"
expect_run_fail 2 "$bt" "$f"

finish
