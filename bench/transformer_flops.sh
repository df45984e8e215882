#!/usr/bin/env bash
# Tokens per second of the nanoGPT "baby" transformer (configs/transformer-shakespeare.yaml)
# and the fraction of this machine's sgemm rate that the model's FLOPs per second reach,
# measured in one run: the sgemm rate first (OpenBLAS, every core), then the training run,
# then the sgemm rate again (the machine may be shared: both are reported).
#   bench/transformer_flops.sh [BUILD_DIR] [-s KEY=VALUE ...]
# e.g. bench/transformer_flops.sh build -s train.steps=300 for a shorter run.
# The model's FLOPs per token are counted as the kernels run them (result.json's
# flops_per_token: 3x the forward gemms incl. full seq x seq attention blocks).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "no $bivouac: build first (cmake --build $build)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-tf-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cc -O2 -o "$tmp/sgemm" "$here/transformer_flops.c" $(pkg-config --cflags --libs openblas)
before=$("$tmp/sgemm")
start=$(date +%s.%N)
"$bivouac" run "$root/configs/transformer-shakespeare.yaml" --out "$tmp/run" --quiet \
    -s resilience=[] "$@"
end=$(date +%s.%N)
after=$("$tmp/sgemm")

python3 - "$tmp/run/result.json" "$before" "$after" "$start" "$end" <<'PY'
import json, sys, os
r = json.load(open(sys.argv[1]))
b, a = json.loads(sys.argv[2]), json.loads(sys.argv[3])
peak = max(b["sgemm_flops_per_second"], a["sgemm_flops_per_second"])
out = {
    "machine_cores": os.cpu_count(),
    "threads": r["threads"],
    "steps": r["steps"],
    "val_loss": r["val_loss"],
    "tokens_per_second": r["tokens_per_second"],
    "model_flops_per_token": r["flops_per_token"],
    "model_flops_per_second": r["model_flops_per_second"],
    "sgemm_flops_per_second_before": b["sgemm_flops_per_second"],
    "sgemm_flops_per_second_after": a["sgemm_flops_per_second"],
    "fraction_of_sgemm": r["model_flops_per_second"] / peak,
    "train_seconds": r["train_seconds"],
    "wall_seconds": float(sys.argv[5]) - float(sys.argv[4]),
    "load_average": os.getloadavg()[0],
}
print(json.dumps(out, indent=1))
PY
