#!/usr/bin/env bash
# A graph-engine role that fails while the engine starts ends the run with exit 1 and that
# role's message, promptly: the stop sends SHUTDOWN only to roles that listen, so it never
# waits on the inbox of a role that is gone (issue 18, class 2). Each role in turn fails its
# set-up (BIVOUAC_FAULT_ROLE_SETUP, core/src/engine/graph/role_loop.c), and, where
# `ulimit -v` works (not under AddressSanitizer), a real out-of-memory in set-up.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exp="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-role-failure.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR="$tmp/cache"
passed=0
failed=0

# fails LABEL WANT_STDERR [VAR=VALUE]... [-- RUN_ARGS...]: `bivouac run` of the quickstart
# (two tensor workers; in the environment given, with RUN_ARGS) exits 1 within 60 s with
# exactly that stderr (or, for WANT_STDERR "re:RE", a stderr that RE matches whole),
# writes no result.json, and leaves no process of its own behind.
fails() {
    local label=$1 want=$2 out="$tmp/run-$((passed + failed))"
    shift 2
    local envs=()
    while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    set +e
    env "${envs[@]}" timeout -s KILL 60 ${ULIMIT_CMD:-} "$BIVOUAC" run "$exp" \
        -s engine.tensor_workers=2 --out "$out" --quiet "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    local code=$?
    set -e
    local why=""
    [[ $code == 1 ]] || why="exit $code, want 1 (137: it hung and was killed)"
    local got
    got=$(cat "$tmp/stderr")
    if [[ $want == re:* ]]; then # a regular expression: the whole stderr must match
        [[ -z $why && ! $got =~ ^${want#re:}$ ]] && why="stderr '$got', want /${want#re:}/"
    else
        [[ -z $why && $got != "$want" ]] && why="stderr '$got', want '$want'"
    fi
    [[ -z $why && -e $out/result.json ]] && why="it wrote result.json"
    [[ -z $why ]] && pgrep -f -- "--out $out" >/dev/null && why="a process of the run is left"
    if [[ -z $why ]]; then
        echo "ok: $label"
        passed=$((passed + 1))
    else
        echo "FAIL: $label: $why" >&2
        failed=$((failed + 1))
    fi
}

for role in "graph server" "parameter server" "tensor worker 0" "tensor worker 1"; do
    fails "$role fails its set-up" "bivouac: error: $role: set-up failed (injected fault)" \
        "BIVOUAC_FAULT_ROLE_SETUP=$role"
done

if ldd "$BIVOUAC" | grep libasan >/dev/null; then  # not -q: with pipefail, ldd could die of SIGPIPE
    echo "skip: the out-of-memory case (ulimit -v does not work under AddressSanitizer)"
else
    # 500 x 20000 and 20000 x 20000 weights, with Adam's moments: ~5 GB for the parameter
    # server alone, under a 3 GB address-space limit.
    ULIMIT_CMD="$tmp/ulimit-v"
    printf '#!/usr/bin/env bash\nulimit -v 3000000 && exec "$@"\n' >"$ULIMIT_CMD"
    chmod +x "$ULIMIT_CMD"
    # The roles set up at once, so which one runs out first varies; its message ends the run.
    fails "a role runs out of memory in set-up" \
        're:bivouac: error: out of memory in (the parameter server|the graph server|tensor worker [01])' \
        -- -s model.hidden=20000 -s model.layers=3
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
