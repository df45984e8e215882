# shellcheck shell=bash disable=SC2034  # EXP, stderr_filter: used by the scripts that source this
# Helpers for tests/integration/bad_*.sh, which feed bivouac bad input and assert the
# exact outcome: exit status, every stderr line, and that nothing was written.
# Sourced, not run (ctest runs only *.sh). Environment (set by ctest): BIVOUAC,
# BIVOUAC_SOURCE_DIR, BIVOUAC_BUILD_DIR, BIVOUAC_DATA_DIR.
#
#   t "what this checks"                  names the next check
#   expect_fail CODE "stderr" cmd...      exit CODE, stderr exactly "stderr", stdout empty
#   expect_run_fail CODE "stderr" EXP [args...]
#                                         `bivouac run EXP --out DIR --quiet args...`
#                                         as expect_fail, and DIR, the working directory
#                                         and the dataset cache stay untouched
#   expect_exit CODE "stderr" cmd...      exit CODE and stderr exactly; stdout not checked
#   known_bug "what is wrong" check...    a check of behaviour the code does not have yet
#                                         (see the lead's bug list): reported, not counted
#                                         as a failure while it fails; a FAIL once it
#                                         passes, so it gets moved to the real checks
#   finish                                prints "N passed, M failed"; exit 1 on failures
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac executable}"
: "${BIVOUAC_SOURCE_DIR:?BIVOUAC_SOURCE_DIR must name the source tree}"
: "${BIVOUAC_BUILD_DIR:?BIVOUAC_BUILD_DIR must name the build tree}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the directory holding cora}"

EXP="$BIVOUAC_SOURCE_DIR/tests/data/experiments"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-bad.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Only the build's own plugins, by their real path (the registry dedups by real path, so
# the "searched" list in messages is exactly this one directory).
export BIVOUAC_PLUGIN_PATH
BIVOUAC_PLUGIN_PATH=$(realpath "$BIVOUAC_BUILD_DIR/plugins")
export BIVOUAC_CACHE_DIR="$tmp/cache"
work="$tmp/cwd" # the working directory: a run that writes runs/ here is caught
mkdir -p "$work"
cd "$work"

passed=0
failed=0
known=0
label=""
why="$tmp/why"

t() { label=$1; }

# Runs cmd into $tmp/stdout and $tmp/stderr; sets rc. A check may set stderr_filter to a
# sed -E script that masks one detail of stderr (say, a size that depends on the ABI).
capture() {
    set +e
    "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    set -e
    if [[ -n ${stderr_filter:-} ]]; then
        sed -E -i "$stderr_filter" "$tmp/stderr"
    fi
}

# Compares $tmp/stderr with the expected text; the difference goes to $why.
stderr_is() {
    if [[ -n $1 ]]; then printf '%s\n' "$1" >"$tmp/expected"; else : >"$tmp/expected"; fi
    diff -u --label "expected stderr" --label "actual stderr" "$tmp/expected" "$tmp/stderr" \
        >>"$why"
}

# The checks below return 0 when the outcome is exactly right, else 1 with $why filled.
outcome_exit() {
    local code=$1 expected=$2
    shift 2
    : >"$why"
    capture "$@"
    local ok=0
    if [[ $rc != "$code" ]]; then
        echo "exit status $rc, expected $code" >>"$why"
        ok=1
    fi
    stderr_is "$expected" || ok=1
    return $ok
}

outcome_fail() {
    local ok=0
    outcome_exit "$@" || ok=1
    if [[ -s $tmp/stdout ]]; then
        { echo "stdout should be empty, got:"; sed 's/^/  | /' "$tmp/stdout"; } >>"$why"
        ok=1
    fi
    return $ok
}

cache_listing() { find "$BIVOUAC_CACHE_DIR" -type f 2>/dev/null | sort; }

outcome_run_fail() {
    local code=$1 expected=$2 exp=$3
    shift 3
    local out="$tmp/out" ok=0
    rm -rf "$out"
    local cache_before
    cache_before=$(cache_listing)
    outcome_fail "$code" "$expected" "$BIVOUAC" run "$exp" --out "$out" --quiet "$@" || ok=1
    if [[ -e $out ]]; then
        { echo "--out $out exists afterwards, holding:"; (cd "$out" && find . | sort); } >>"$why"
        ok=1
    fi
    if [[ -n $(ls -A "$work") ]]; then
        { echo "the working directory $work is no longer empty:"; ls -A "$work"; } >>"$why"
        ok=1
        rm -rf "${work:?}"/* "${work:?}"/.[!.]* 2>/dev/null || true
    fi
    if [[ $(cache_listing) != "$cache_before" ]]; then
        echo "the dataset cache $BIVOUAC_CACHE_DIR changed" >>"$why"
        ok=1
    fi
    return $ok
}

report() {
    if [[ $1 == 0 ]]; then
        passed=$((passed + 1))
        echo "ok   - $label"
    else
        failed=$((failed + 1))
        echo "FAIL - $label"
        echo "       command: ${*:2}"
        sed 's/^/       /' "$why"
    fi
}

expect_exit() {
    local s=0
    outcome_exit "$@" || s=1
    report $s "${@:3}"
}

expect_fail() {
    local s=0
    outcome_fail "$@" || s=1
    report $s "${@:3}"
}

expect_run_fail() {
    local s=0
    outcome_run_fail "$@" || s=1
    report $s "$BIVOUAC run ${*:3} --out $tmp/out --quiet"
}

# known_bug "what is wrong" outcome_fail|outcome_run_fail|outcome_exit|fn args...
known_bug() {
    local what=$1
    shift
    if "$@"; then
        failed=$((failed + 1))
        echo "FAIL - $label: known bug '$what' no longer shows: move this check to the" \
            "expected ones"
    else
        known=$((known + 1))
        echo "bug  - $label (known, not counted: $what)"
        sed 's/^/       /' "$why"
    fi
}

finish() {
    if ((known)); then
        echo "$known known bug(s) shown above, not counted"
    fi
    echo "$passed passed, $failed failed"
    ((failed == 0))
}
