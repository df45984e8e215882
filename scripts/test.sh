#!/usr/bin/env bash
# The test suite, as CI runs it (.ci/run): installs the dependencies, builds
# RelWithDebInfo into build/ and runs ctest, then builds with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan/ and runs the suite again there, then builds
# with ThreadSanitizer into build-tsan/ and runs the tests labelled tsan (the code with
# threads: tests/integration/threads.sh).
# Exits non-zero if a build fails or any test fails in either pass; ends with each pass's
# ctest summary and wall time.
#
# Environment:
#   BIVOUAC_DATA_DIR    datasets (default: ../shared/data next to the repository). The
#                       tests' ENVIRONMENT property (CMakeLists.txt) sets its own value,
#                       ../shared/data, which wins inside ctest for now.
#   BIVOUAC_JOBS        build and ctest parallelism (default 2)
#   BIVOUAC_ASAN_SKIP   ctest label the sanitizer pass leaves out (default "slow":
#                       tests with LABELS slow run only in the first pass)
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
jobs="${BIVOUAC_JOBS:-2}"
asan_skip="${BIVOUAC_ASAN_SKIP-slow}"
export BIVOUAC_DATA_DIR="${BIVOUAC_DATA_DIR:-$repo/../shared/data}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/bivouac-test.XXXXXX")"
start=$SECONDS
summaries=()
failed=0

elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# pass NAME BUILD_DIR CMAKE_ARGS... -- CTEST_ARGS...
pass() {
    local name="$1" dir="$2"
    shift 2
    local cmake_args=() ctest_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    ctest_args=("$@")
    local t0=$SECONDS log="$logs/$dir.log"

    echo "== [$name] configuring and building into $dir/"
    if ! cmake -S . -B "$dir" "${cmake_args[@]}" || ! cmake --build "$dir" -j "$jobs"; then
        summaries+=("[$name] BUILD FAILED after $(elapsed $((SECONDS - t0)))")
        failed=1
        return 1
    fi
    echo "== [$name] ctest in $dir/ (BIVOUAC_DATA_DIR=$BIVOUAC_DATA_DIR)"
    (cd "$dir" && ctest -j "$jobs" --output-on-failure "${ctest_args[@]}") 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    # LeakSanitizer's own tracer sometimes crashes at a process's exit ("Tracer caught
    # signal 11 ... LeakSanitizer has encountered a fatal error": google/sanitizers#1353,
    # not a leak, which reads "detected memory leaks"). Where that is in the log, the
    # failed tests run once more, and the summary says so.
    local failed_log="$log" rerun=""
    if [ "$rc" -ne 0 ] && grep -q 'Tracer caught signal' "$log"; then
        local again="$logs/$dir.rerun.log"
        echo "== [$name] LeakSanitizer's tracer crashed (google/sanitizers#1353): the failed tests once more"
        (cd "$dir" && ctest --rerun-failed --output-on-failure "${ctest_args[@]}") 2>&1 |
            tee "$again"
        rc=${PIPESTATUS[0]}
        rerun="    rerun once after LeakSanitizer's tracer crashed: $(grep -E '^[0-9]+% tests passed' "$again")"
        failed_log="$again"
    fi
    local summary
    summary="$(grep -E '^[0-9]+% tests passed|^Total Test time|^No tests were found' "$log" |
               paste -sd ';' - | sed 's/;/; /g')"
    summaries+=("[$name] ${summary:-no ctest summary} -- $(elapsed $((SECONDS - t0))) with the build")
    [ -z "$rerun" ] || summaries+=("$rerun")
    if [ "$rc" -ne 0 ]; then
        failed=1
        while IFS= read -r line; do summaries+=("    failed: ${line#*- }"); done \
            < <(sed -n '/^The following tests FAILED:/,/^Errors while running/p' "$failed_log" |
                grep -vE '^(The following|Errors while)' | sed 's/^[[:space:]]*//')
    fi
}

echo "== installing dependencies (scripts/install-deps.sh)"
if ! scripts/install-deps.sh; then
    echo "scripts/test.sh: installing the dependencies failed" >&2
    exit 1
fi

pass "RelWithDebInfo" build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBIVOUAC_TESTS=ON -DBIVOUAC_SANITIZE=OFF --

asan_ctest=()
[ -n "$asan_skip" ] && asan_ctest=(-LE "$asan_skip")
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pass "ASan+UBSan" build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBIVOUAC_TESTS=ON -DBIVOUAC_SANITIZE=ON \
    -- "${asan_ctest[@]}"
unset ASAN_OPTIONS UBSAN_OPTIONS

export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
pass "ThreadSanitizer" build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBIVOUAC_TESTS=ON -DBIVOUAC_TSAN=ON \
    -- -L tsan
unset TSAN_OPTIONS

echo
echo "== scripts/test.sh summary"
for s in "${summaries[@]}"; do echo "$s"; done
if [ "$failed" -ne 0 ]; then
    echo "FAILED after $(elapsed $((SECONDS - start))) (logs in $logs)"
    exit 1
fi
echo "all passed in $(elapsed $((SECONDS - start)))"
rm -rf "$logs"
