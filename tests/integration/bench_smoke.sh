#!/usr/bin/env bash
# bench/run --quick --no-reference against the already-built tree: the harness builds its
# microbenchmarks, measures triad / sgemm / SpMM, runs each available model's benchmark,
# and writes results.json with every required key and plausible numbers. Under 60 s.
# Environment (set by ctest): BIVOUAC_BUILD_DIR (the built tree), BIVOUAC_DATA_DIR,
# BIVOUAC_SOURCE_DIR. Run by hand: BIVOUAC_BUILD_DIR=build tests/integration/bench_smoke.sh
set -euo pipefail

BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIVOUAC_BUILD_DIR=${BIVOUAC_BUILD_DIR:-$BIVOUAC_SOURCE_DIR/build}
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$BIVOUAC_SOURCE_DIR/../shared/data}

# The microbenchmarks link libbivouac without the sanitizer runtime; timings of an
# instrumented build would mean nothing anyway.
if grep -q '^BIVOUAC_SANITIZE:BOOL=ON' "$BIVOUAC_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
    echo "skipped: $BIVOUAC_BUILD_DIR is a sanitizer build"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-bench-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
if ! "$BIVOUAC_SOURCE_DIR/bench/run" --quick --no-reference \
        --build-dir "$BIVOUAC_BUILD_DIR" --out "$tmp/out" >"$tmp/stdout" 2>"$tmp/stderr"; then
    cat "$tmp/stdout" "$tmp/stderr" >&2
    echo "FAIL: bench/run --quick --no-reference failed" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
elapsed=$(($(date +%s) - start))
cat "$tmp/stdout"

python3 - "$tmp/out/results.json" "$elapsed" <<'PY'
import json
import sys

path, elapsed = sys.argv[1], int(sys.argv[2])
r = json.load(open(path))
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print("ok: " + what)
    else:
        failed += 1
        print("FAIL: " + what, file=sys.stderr)


def between(x, lo, hi):
    return isinstance(x, (int, float)) and lo < x < hi


check(elapsed < 60, "bench/run --quick --no-reference took %d s (< 60)" % elapsed)
check(r.get("mode") == "quick" and r.get("threads") == 2, "quick mode with 2 threads")
check(r.get("reference") == "--no-reference", "no reference was run")
for key in ("triad_gbps", "sgemm_gflops", "spmm_triad_fraction",
            "transformer_sgemm_fraction"):
    check(key in r, "results.json has %s" % key)
check(between(r.get("triad_gbps"), 0.1, 5000), "triad %s GB/s is plausible" % r.get("triad_gbps"))
check(between(r.get("sgemm_gflops"), 0.1, 1e5),
      "sgemm %s GFLOP/s is plausible" % r.get("sgemm_gflops"))
check(between(r.get("spmm_triad_fraction"), 0.0, 10.0),
      "SpMM / triad %s is plausible" % r.get("spmm_triad_fraction"))
benches = {b["name"]: b for b in r.get("benchmarks", [])}
check("gcn-cora" in benches and "skipped" not in benches["gcn-cora"], "gcn-cora ran")
for name, b in benches.items():
    for key in ("name", "bivouac_median_s", "reference_median_s", "speedup_vs_reference",
                "peak_rss_mb"):
        check(key in b, "%s has %s" % (name, key))
    if "skipped" in b:
        check("not available yet" in b["skipped"], "%s skipped: %s" % (name, b["skipped"]))
        continue
    check(between(b.get("bivouac_median_s"), 0.0, 60.0),
          "%s: %s s per %s" % (name, b.get("bivouac_median_s"), b.get("unit")))
    check(b.get("bivouac_min_s") <= b.get("bivouac_median_s") <= b.get("bivouac_max_s"),
          "%s: min <= median <= max" % name)
    check(between(b.get("peak_rss_mb"), 1.0, 65536.0),
          "%s: peak RSS %s MB" % (name, b.get("peak_rss_mb")))
    check(b.get("reference_median_s") is None and b.get("speedup_vs_reference") is None,
          "%s: no reference numbers without a reference" % name)
    check(not b.get("bivouac_errors"), "%s: no failed bivouac run" % name)
if "transformer-shakespeare" in benches and "skipped" not in benches["transformer-shakespeare"]:
    check(between(r.get("transformer_sgemm_fraction"), 0.0, 10.0),
          "transformer / sgemm %s is plausible" % r.get("transformer_sgemm_fraction"))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
