#!/usr/bin/env bash
# Runs the libFuzzer targets that build.sh made, each for SECONDS (default 600), FUZZ_JOBS
# at a time (default 2), and prints executions, exec/s, corpus size and crashes per target.
# Seeds come from the repository's fixtures; corpora and crash inputs are kept under
# OUT_DIR (build-fuzz/ by default) so that a second run goes on where the first stopped.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]   e.g. tests/fuzz/run.sh 60 fuzz_policy
# Not run in CI: see tests/fuzz/README.md.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${FUZZ_OUT:-$root/build-fuzz}"
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_graph fuzz_graph_cache fuzz_checkpoint fuzz_policy fuzz_role_frame fuzz_graph_part)
jobs_at_once="${FUZZ_JOBS:-2}"
data="$root/tests/data"

for t in "${targets[@]}"; do
  [ -x "$out/$t" ] || { echo "$out/$t is missing: run tests/fuzz/build.sh first" >&2; exit 2; }
done

# seeds TARGET DIR: copies (or makes) the target's seed inputs into DIR.
seeds() {
  local t="$1" dir="$2"
  mkdir -p "$dir"
  case "$t" in
    fuzz_config)
      cp "$root"/configs/*.yaml "$data"/experiments/*.yaml "$data"/resume/*.yaml "$dir"/
      find "$data/config" -name '*.yaml' -exec cp {} "$dir"/ \;
      ;;
    fuzz_graph)
      local g
      for g in "$data"/graphs/*/; do
        { cat "$g/meta.yaml"; printf '\n@@@@\n'; cat "$g/edges.tsv" 2>/dev/null
          printf '\n@@@@\n'; cat "$g/features.svm" 2>/dev/null; printf '\n@@@@\n'
          cat "$g/split.tsv" 2>/dev/null; } > "$dir/$(basename "$g")"
      done
      ;;
    fuzz_graph_cache)
      # The cache files fuzz_graph writes for the valid datasets among its seeds.
      local tmp
      tmp="$(mktemp -d)"
      seeds fuzz_graph "$tmp/graphs"
      BV_FUZZ_CACHE_OUT="$dir" "$out/fuzz_graph" "$tmp"/graphs/* >/dev/null 2>&1
      rm -rf "$tmp"
      ;;
    fuzz_checkpoint)
      BV_FUZZ_WRITE_SEEDS="$dir" "$out/fuzz_checkpoint" >/dev/null 2>&1
      ;;
    fuzz_role_frame | fuzz_graph_part)
      BV_FUZZ_WRITE_SEEDS="$dir" "$out/$t" >/dev/null 2>&1
      ;;
    fuzz_policy)
      cp "$data"/lua/*.lua "$data"/experiments/*.lua "$data"/resume/*.lua "$dir"/
      find "$root/examples" -name '*.lua' -exec cp {} "$dir"/ \; 2>/dev/null
      ;;
  esac
}

run_one() {
  local t="$1"
  local corpus="$out/corpus/$t" seed="$out/seeds/$t" crashes="$out/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  rm -rf "$seed"
  seeds "$t" "$seed"
  local start end
  start=$(date +%s)
  local dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  (cd "$out" && "./$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" "$corpus" "$seed" \
      > "$out/$t.log" 2>&1)
  end=$(date +%s)
  echo "$((end - start))" > "$out/$t.seconds"
}

summary() {
  printf '%-18s %8s %12s %8s %8s %8s\n' target seconds executions exec/s corpus crashes
  local t total=0
  for t in "${targets[@]}"; do
    local log="$out/$t.log"
    local execs rate secs corpus crashes
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
    secs=$(cat "$out/$t.seconds" 2>/dev/null)
    corpus=$(find "$out/corpus/$t" -type f | wc -l)
    crashes=$(find "$out/crashes/$t" -type f | wc -l)
    printf '%-18s %8s %12s %8s %8s %8s\n' "$t" "${secs:-?}" "${execs:-?}" "${rate:-?}" \
      "$corpus" "$crashes"
    total=$((total + ${execs:-0}))
  done
  echo "total executions: $total"
  local c
  for c in "$out"/crashes/*/*; do
    [ -f "$c" ] && echo "crash input: $c"
  done
}

running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n
    running=$((running - 1))
  fi
  echo "$(date -u +%H:%M:%S) $t: ${seconds}s (log: $out/$t.log)"
  run_one "$t" &
  running=$((running + 1))
done
wait
summary
