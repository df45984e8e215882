# shellcheck shell=bash
# Helpers for the integration tests that start node processes (sourced, not run: ctest
# runs only *.sh). Needs $tmp (the test's directory) and $TMPDIR (where the runs' socket
# directories go, so that leftovers can see none is left).
#   run LOG ARGS...    bivouac ARGS in a process group of its own, stdout and stderr in
#                      LOG.out and LOG.err; sets rc and pgid, and adds pgid to groups
#   run_signal LOG N SIG PATTERN ARGS...
#                      `run LOG ARGS...` (its --out LOG) in the background; once LOG has N
#                      training records (up to 30 s), SIG to the processes of its group
#                      whose command line matches PATTERN; the run then has 60 s to end
#                      (else KILL to its group: rc 137); sets rc and pgid, adds pgid
#   leftovers PGID     "processes N, socket dirs M": what of the run is still there after
#                      up to 5 s (under the sanitizers exit takes a while)
#   procs_setup NAME   the test's directory $tmp (bivouac-NAME.XXXXXX under $TMPDIR or
#                      /tmp), procs_cleanup as the EXIT trap, and $TMPDIR (exported) a
#                      directory of its own in it: the runs' socket directories go there
#   procs_cleanup      the trap: kills every group the test started, removes $tmp
groups=() # process groups this test started: killed at the end, whatever happens

procs_setup() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-$1.XXXXXX")
    trap procs_cleanup EXIT
    export TMPDIR="$tmp/sockets"
    mkdir -p "$TMPDIR"
}

procs_cleanup() {
    for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
    rm -rf "$tmp"
}

run() {
    local log=$1
    shift
    rc=0
    setsid bash -c 'echo $$ >"$0.pgid"; exec "$@"' "$log" "$BIVOUAC" "$@" \
        >"$log.out" 2>"$log.err" </dev/null || rc=$?
    pgid=$(cat "$log.pgid")
    groups+=("$pgid")
}

run_signal() {
    local log=$1 n=$2 sig=$3 pattern=$4 waiter lines
    shift 4
    (run "$log" "$@"; echo "$rc" >"$log.rc") &
    waiter=$!
    until [ -s "$log.pgid" ]; do sleep 0.01; done
    pgid=$(cat "$log.pgid")
    groups+=("$pgid")
    for _ in $(seq 3000); do
        lines=0
        [ -f "$log/metrics.jsonl" ] && lines=$(grep -c '"train_loss"' "$log/metrics.jsonl" || true)
        [ "$lines" -ge "$n" ] && break
        sleep 0.01
    done
    pkill "-$sig" -g "$pgid" -f -- "$pattern" || true
    for _ in $(seq 6000); do [ -s "$log.rc" ] && break; sleep 0.01; done
    [ -s "$log.rc" ] || kill -KILL -- "-$pgid" 2>/dev/null || true # it hung
    wait "$waiter" || true
    rc=$(cat "$log.rc")
}

leftovers() {
    local left
    for _ in $(seq 500); do [ "$(pgrep -g "$1" | wc -l)" = 0 ] && break; sleep 0.01; done
    left=$(pgrep -g "$1" 2>/dev/null | wc -l || true)
    echo "processes $left, socket dirs $(find "$TMPDIR" -mindepth 1 | wc -l)"
}
