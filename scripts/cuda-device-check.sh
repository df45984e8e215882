#!/usr/bin/env bash
# The GPU checks of issue 17 in one go, on a machine with a GPU, from a pack made by
# scripts/cuda-device-pack.sh: every cuda kernel against the cpu one, gradient checks,
# training on the GPU (tests/integration/cuda_train.sh), the refusal without a GPU, then
# the benchmark against PyTorch / PyG on the same GPU (bench/harness/cuda.py).
#   scripts/cuda-device-check.sh PACK_DIR OUT_DIR [all|tests|kernels|train|bench] [BENCH_ONLY]
# (tests: kernels, then train; CUDA_TRAIN_MODELS picks train's models, default all three)
# (BENCH_REPS, BENCH_ARGS: more of bench/harness/cuda.py's arguments, e.g. --base-bin DIR)
# Logs go to OUT_DIR; a summary is printed last.
set -uo pipefail
pack=$(realpath "$1")
out=$(realpath -m "$2")
what=${3:-all}
mkdir -p "$out"
export LD_LIBRARY_PATH="$pack/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export BIVOUAC="$pack/bin/bivouac" BIVOUAC_PLUGIN_PATH="$pack/bin/plugins"
export BIVOUAC_DATA_DIR="$pack/data" BIVOUAC_SOURCE_DIR=$PWD
deadline=$((SECONDS + ${BIVOUAC_CHECK_SECONDS:-3600})) # the whole check, at most
summary=()
step() { # name timeout command...: within its timeout and the check's deadline
    local name=$1 limit=$2 rc=0 t0=$SECONDS
    shift 2
    [ $((deadline - SECONDS)) -lt "$limit" ] && limit=$((deadline - SECONDS))
    if [ "$limit" -le 0 ]; then
        summary+=("$(printf '%-22s not run: no time left' "$name")")
        return
    fi
    timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
    summary+=("$(printf '%-22s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
    tail -n 40 "$out/$name.log"
}
nvidia-smi -L
if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = kernels ]; then
    step kernels 120 "$pack/tests/test_compute_cuda"
    step gradcheck 120 "$pack/tests/test_gradcheck_cuda"
    step refused 60 bash tests/integration/cuda_refused.sh
fi
if [ "$what" = all ] || [ "$what" = tests ] || [ "$what" = train ]; then
    step train 400 bash tests/integration/cuda_train.sh
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
    # torch gets its own libraries; bivouac's programs get the pack's (BIVOUAC_LIB_PATH)
    BIVOUAC_LIB_PATH=$LD_LIBRARY_PATH \
        step bench 500 env -u LD_LIBRARY_PATH python3 bench/harness/cuda.py --bin "$pack/bin" --tools "$pack/tools" \
        --data-dir "$pack/data" --out "${BENCH_OUT:-$out/bench}" ${4:+--only "$4"} \
        --reps "${BENCH_REPS:-2}" ${BENCH_ARGS:-}
fi
printf '%s\n' "${summary[@]}"
