#!/usr/bin/env bash
# The engines' threads (graph-engine roles sharing arrays, gated passes, the cpu plugin's
# pool, the checkpoint writer, pipeline stages) run without data races: scripts/test.sh runs this test (LABELS tsan)
# in a ThreadSanitizer build, where any race ends the run with exit 66. The roles talk over
# the example in-process transport (examples/plugins/transport_queue.c), whose mutexes and
# condition variables ThreadSanitizer sees; libzmq's lock-free queues are not instrumented
# and would hide every hand-over between roles. In every build the runs must also agree:
# the same weights with arrays shared or copied, and (outside ThreadSanitizer) over zmq.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_BUILD_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_BUILD_DIR:?BIVOUAC_BUILD_DIR must name the build tree}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-threads.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export BIVOUAC_CACHE_DIR="$tmp/cache"
export BIVOUAC_PLUGIN_PATH="$BIVOUAC_BUILD_DIR/test-plugins/queue:$BIVOUAC_BUILD_DIR/plugins"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"
tsan=false
ldd "$BIVOUAC" | grep libtsan >/dev/null && tsan=true # not -q (pipefail, SIGPIPE)
passed=0
failed=0

crc() { grep -o '"params_crc32c": "[0-9a-f]*"' "$1/result.json"; }
# run NAME EXP ARGS...: a run that must succeed (66: ThreadSanitizer found a race)
run() {
    local name=$1 exp=$2
    shift 2
    set +e
    "$BIVOUAC" run "$exp" --out "$tmp/$name" --quiet "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local code=$?
    set -e
    if [[ $code == 0 ]]; then
        echo "ok: $name ran clean"
        passed=$((passed + 1))
    else
        echo "FAIL: $name exited $code:" >&2
        head -40 "$tmp/$name.err" >&2
        failed=$((failed + 1))
    fi
}
same() { # same LABEL A B: equal params_crc32c
    if [[ -e $tmp/$2/result.json && $(crc "$tmp/$2") == $(crc "$tmp/$3") ]]; then
        echo "ok: $1 ($(crc "$tmp/$2"))"
        passed=$((passed + 1))
    else
        echo "FAIL: $1: $(crc "$tmp/$2" 2>&1) vs $(crc "$tmp/$3" 2>&1)" >&2
        failed=$((failed + 1))
    fi
}

quick="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"
graph=(-s train.epochs=3 -s engine.tensor_workers=2 -s engine.intervals=3 -s compute.threads=2)
for model in gcn gat; do
    for share in true false; do
        run "$model-queue-$share" "$quick" -s model.plugin=$model "${graph[@]}" \
            -s transport.plugin=queue -s engine.share_arrays=$share
    done
    same "$model: arrays shared or copied, the same weights" "$model-queue-true" \
        "$model-queue-false"
    if ! $tsan; then
        run "$model-zmq" "$quick" -s model.plugin=$model "${graph[@]}"
        same "$model: the queue transport gives zmq's weights" "$model-queue-true" "$model-zmq"
    fi
done
# a policy changes the cpu plugin's thread count after every epoch (each role's instance
# replaces its pool at its next kernel) and reads the kernel timers the roles update
run gcn-queue-set-threads "$quick" -s model.plugin=gcn "${graph[@]}" -s transport.plugin=queue \
    -s "policy.file=$BIVOUAC_SOURCE_DIR/tests/data/transformer/policy_exports.lua" \
    -s policy.params.case=live -s policy.on_error=stop
# a gated pass (the staleness plugin, docs/staleness.md): intervals of different stages and
# epochs at once, forward results scattered by the graph server while workers add
# backward results in place, an evaluation on its own arrays while intervals are ahead
sed -e '/^policy:/,$d' "$quick" >"$tmp/gated.yaml"
echo "resilience: [{plugin: staleness, mode: async, s: 1}]" >>"$tmp/gated.yaml"
for model in gcn gat; do
    run "$model-queue-gated" "$tmp/gated.yaml" -s model.plugin=$model "${graph[@]}" \
        -s engine.intervals=6 -s transport.plugin=queue
done
# the sequence engine with the checkpoint plugin's writer thread
tiny="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
run transformer "$tiny" -s train.steps=20
# the pipeline engine: 2 pipelines of 2 stages, 2 microbatches each, as threads (the
# all-reduce, the tied projection's sum, the norm, activations both ways)
pipe=(-s train.steps=12 -s train.batch=8 -s pipeline.stages=2 -s pipeline.pipelines=2
      -s pipeline.microbatches=2)
run pipeline-queue "$tiny" "${pipe[@]}" -s transport.plugin=queue
if ! $tsan; then
    run pipeline-zmq "$tiny" "${pipe[@]}"
    same "pipeline: the queue transport gives zmq's weights" pipeline-queue pipeline-zmq
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
