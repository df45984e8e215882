# shellcheck shell=bash
# Helpers for the integration tests that start node processes (sourced, not run: ctest
# runs only *.sh). Needs $tmp (the test's directory) and $TMPDIR (where the runs' socket
# directories go, so that leftovers can see none is left).
#   run LOG ARGS...    bivouac ARGS in a process group of its own, stdout and stderr in
#                      LOG.out and LOG.err; sets rc and pgid, and adds pgid to groups
#   leftovers PGID     "processes N, socket dirs M": what of the run is still there after
#                      up to 5 s (under the sanitizers exit takes a while)
#   procs_cleanup      the trap: kills every group the test started, removes $tmp
groups=() # process groups this test started: killed at the end, whatever happens

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

leftovers() {
    local left
    for _ in $(seq 500); do [ "$(pgrep -g "$1" | wc -l)" = 0 ] && break; sleep 0.01; done
    left=$(pgrep -g "$1" 2>/dev/null | wc -l || true)
    echo "processes $left, socket dirs $(find "$TMPDIR" -mindepth 1 | wc -l)"
}
