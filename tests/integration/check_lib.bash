# shellcheck shell=bash
# Small helpers for the integration tests that compare run outputs (sourced, not run:
# ctest runs only *.sh). Counters start at 0; end a script with `finish`.
#   check "what" ACTUAL EXPECTED   ok when equal, else a FAIL line with both
#   field DIR NAME                 '"NAME": value' from DIR/result.json (the first one)
#   finish                         "N passed, M failed"; exit 1 on failures
passed=0
failed=0

check() {
    if [ "$2" = "$3" ]; then
        echo "ok: $1"
        passed=$((passed + 1))
    else
        echo "FAIL: $1: got '$2', want '$3'" >&2
        failed=$((failed + 1))
    fi
}

field() { grep -o "\"$2\": [^,}]*" "$1/result.json" | head -1; }

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
