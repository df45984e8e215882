#!/usr/bin/env bash
# Plugins build out of tree against the INSTALLED SDK and run, with the core untouched:
# install the build into a temporary prefix, build examples/plugins (one example of each
# kind: model_mlp, compute_naive, transport_queue, resilience_statelog) with
# find_package(bivouac) and with pkg-config, warnings as errors, then list them and train
# with each using the installed `bivouac`:
#   mlp        trains mlp-quickstart.yaml to a test accuracy above 0.5, and a policy
#              calls its exports (a result, and a failure with its exact message);
#   statelog   writes "epoch E blobs 12 bytes B" for E = 1..100, B the GCN state's size;
#   queue      gives the zmq run's weights, bit for bit (params_crc32c);
#   naive      lands within 0.02 of the cpu run's test accuracy (sums in another order);
# and out_of_tree_transport.c checks what training does not reach of transport.h
# (timeouts, a full queue, sends before the bind) on transport_queue.so.
# Environment (set by ctest): BIVOUAC_BUILD_DIR, BIVOUAC_SOURCE_DIR; BIVOUAC_DATA_DIR is
# passed through. BIVOUAC_OOT_SDK_ONLY=1 stops after the build checks (no CLI needed).
set -euo pipefail

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
step() { echo "== $*"; }

: "${BIVOUAC_BUILD_DIR:?BIVOUAC_BUILD_DIR must name the core build directory}"
: "${BIVOUAC_SOURCE_DIR:?BIVOUAC_SOURCE_DIR must name the source tree}"
CMAKE=${CMAKE:-cmake}
example="$BIVOUAC_SOURCE_DIR/examples/plugins"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-oot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

core_lib="$BIVOUAC_BUILD_DIR/core/libbivouac.so"
[[ -e "$core_lib" ]] || fail "no core library at $core_lib (build the project first)"
core_sum_before=$(sha256sum "$(readlink -f "$core_lib")" | cut -d' ' -f1)

step "install $BIVOUAC_BUILD_DIR into $prefix"
"$CMAKE" --install "$BIVOUAC_BUILD_DIR" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
for f in include/bivouac.h include/bivouac/plugin.h include/bivouac/model.h \
    lib/cmake/bivouac/bivouacConfig.cmake lib/cmake/bivouac/bivouacConfigVersion.cmake \
    lib/cmake/bivouac/bivouacTargets.cmake lib/cmake/bivouac/BivouacPluginSDK.cmake \
    lib/pkgconfig/bivouac.pc; do
    [[ -f "$prefix/$f" ]] || fail "installed SDK lacks $f"
done
compgen -G "$prefix/lib/libbivouac.so.*" >/dev/null || fail "installed SDK lacks libbivouac.so.*"

step "pkg-config reads the installed bivouac.pc"
if command -v pkg-config >/dev/null; then
    pc=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs bivouac) ||
        fail "pkg-config --cflags --libs bivouac failed"
    [[ "$pc" == *"-I$prefix/include"* && "$pc" == *"-L$prefix/lib"* && "$pc" == *-lbivouac* ]] ||
        fail "pkg-config gave '$pc', expected -I$prefix/include -L$prefix/lib -lbivouac"
    plugindir=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --variable=plugindir bivouac)
    [[ "$plugindir" == "$prefix/lib/bivouac/plugins" ]] ||
        fail "pkg-config plugindir is '$plugindir', expected $prefix/lib/bivouac/plugins"
else
    echo "(pkg-config not installed: skipped)"
fi

step "build examples/plugins with find_package(bivouac)"
# Only the installed prefix is offered to find_package: the build tree must not be needed.
build="$tmp/example-build"
"$CMAKE" -S "$example" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS=-Werror \
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log" >&2; fail "configuring examples/plugins against $prefix failed"; }
grep -q "bivouac_DIR:PATH=$prefix/lib/cmake/bivouac" "$build/CMakeCache.txt" ||
    fail "find_package(bivouac) did not pick the installed SDK: $(grep bivouac_DIR "$build/CMakeCache.txt")"
"$CMAKE" --build "$build" -j2 >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log" >&2; fail "building examples/plugins failed"; }
plugin_dir="$build/plugins"
examples=(model_mlp compute_naive transport_queue resilience_statelog)
for ex in "${examples[@]}"; do
    so="$plugin_dir/$ex.so"
    [[ -f "$so" ]] || fail "no $so after the build"
done

step "each example exports only bv_<kind>_<name>_plugin, links libbivouac, RPATH $prefix/lib"
for ex in "${examples[@]}"; do
    so="$plugin_dir/$ex.so"
    exported=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort | tr '\n' ' ')
    [[ "$exported" == "bv_${ex}_plugin " ]] ||
        fail "$ex.so exports '$exported', expected only bv_${ex}_plugin"
    readelf -d "$so" | grep "NEEDED.*libbivouac.so" >/dev/null || fail "$ex.so is not linked to libbivouac"
    readelf -d "$so" | grep -Eq "(RPATH|RUNPATH).*\[$prefix/lib\]" ||
        fail "$ex.so's RPATH is not $prefix/lib: $(readelf -d "$so" | grep -E 'RPATH|RUNPATH')"
done

if command -v make >/dev/null && command -v pkg-config >/dev/null; then
    step "build examples/plugins with the pkg-config Makefile"
    mkdir "$tmp/make-build"
    PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$tmp/make-build" \
        -f "$example/Makefile" CFLAGS="-O2 -g -Werror" >"$tmp/make.log" 2>&1 ||
        { cat "$tmp/make.log" >&2; fail "make -f examples/plugins/Makefile failed"; }
    for ex in "${examples[@]}"; do
        [[ -f "$tmp/make-build/$ex.so" ]] || fail "the Makefile did not produce $ex.so"
    done
fi

if command -v pkg-config >/dev/null; then
    # Training never times out a recv or fills a queue: a C program checks those promises
    # of transport.h on transport_queue.so through its ops table.
    step "transport_queue.so keeps the rest of transport.h (out_of_tree_transport.c)"
    checker="$tmp/out_of_tree_transport"
    # A sanitizer build's libbivouac needs the ASan runtime first in the program (plugins,
    # loaded later, do not), so the checker is built with the sanitizers too.
    sanitize=()
    readelf -d "$prefix/lib/libbivouac.so" | grep "NEEDED.*libasan" >/dev/null &&
        sanitize=(-fsanitize=address,undefined)
    ${CC:-cc} -std=c17 -O2 -Wall -Wextra -Werror "${sanitize[@]}" \
        $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags bivouac) \
        -o "$checker" "$BIVOUAC_SOURCE_DIR/tests/integration/out_of_tree_transport.c" \
        $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --libs bivouac) -ldl -pthread \
        -Wl,-rpath,"$prefix/lib" >"$tmp/checker.log" 2>&1 ||
        { cat "$tmp/checker.log" >&2; fail "building out_of_tree_transport.c failed"; }
    "$checker" "$plugin_dir/transport_queue.so" queue ||
        fail "transport_queue.so breaks transport.h's contract (see above)"
fi

step "the core build is untouched"
core_sum_after=$(sha256sum "$(readlink -f "$core_lib")" | cut -d' ' -f1)
[[ "$core_sum_before" == "$core_sum_after" ]] || fail "libbivouac.so in $BIVOUAC_BUILD_DIR changed"
for ex in "${examples[@]}"; do
    [[ ! -e "$BIVOUAC_BUILD_DIR/plugins/$ex.so" ]] ||
        fail "the example plugin $ex.so landed in the core build's plugin directory"
done

if [[ "${BIVOUAC_OOT_SDK_ONLY:-0}" == 1 ]]; then
    echo "PASS (SDK only: the CLI steps were skipped)"
    exit 0
fi

bivouac="$prefix/bin/bivouac"
[[ -x "$bivouac" ]] || fail "the install has no $bivouac"
export BIVOUAC_PLUGIN_PATH="$plugin_dir"

step "bivouac plugins lists the four examples"
"$bivouac" plugins >"$tmp/plugins.txt" 2>&1 ||
    { cat "$tmp/plugins.txt" >&2; fail "bivouac plugins exited non-zero"; }
for ex in "${examples[@]}"; do
    kind=${ex%%_*} name=${ex#*_}
    grep -Eq "^$kind[[:space:]]+$name[[:space:]]+0\.1\.0" "$tmp/plugins.txt" ||
        { cat "$tmp/plugins.txt" >&2; fail "bivouac plugins does not list '$kind $name 0.1.0'"; }
done

step "bivouac run mlp-quickstart.yaml"
run="$tmp/run"
"$bivouac" run "$example/mlp-quickstart.yaml" --out "$run" >"$tmp/run.log" 2>&1 ||
    { tail -n 40 "$tmp/run.log" >&2; fail "bivouac run mlp-quickstart.yaml exited non-zero"; }
result="$run/result.json"
[[ -f "$result" ]] || fail "no $result"
python3 - "$result" <<'EOF' || fail "result.json does not show a trained mlp (see above)"
import json, sys
r = json.load(open(sys.argv[1]))
missing = [k for k in ("model", "dataset", "seed", "epochs", "best_val_accuracy",
                       "test_accuracy", "wall_seconds") if k not in r]
if missing:
    sys.exit(f"result.json lacks {missing}")
if r["model"] != "mlp":
    sys.exit(f"result.json model is {r['model']!r}, expected 'mlp'")
if not r["test_accuracy"] > 0.5:
    sys.exit(f"test_accuracy {r['test_accuracy']} is not above 0.5")
print(f"test_accuracy {r['test_accuracy']:.3f}")
EOF

step "a policy calls model_mlp.so's exports (plugins.model.mlp.*)"
grep -Fq 'export plugins.model.mlp.weights  i:iii  weights of the model for (features, classes, hidden)' \
    "$tmp/plugins.txt" || { cat "$tmp/plugins.txt" >&2; fail "bivouac plugins does not list the mlp's exports"; }
cat >"$tmp/mlp_policy.lua" <<'LUA'
local mlp = plugins.model.mlp
local weights = mlp.weights(100, 4, 32)   -- pure: callable in set-up
function on_epoch_end(m)
  if m.epoch == params.bad_at then mlp.weights(0, 4, 32) end
  if m.epoch == 3 then
    return {stop = true, reason = "weights " .. weights .. ", " .. mlp.describe("communities")}
  end
end
LUA
mlp_policy_run() { # NAME ARGS...
    local name=$1
    shift
    "$bivouac" run "$example/mlp-quickstart.yaml" --out "$tmp/$name" --quiet \
        -s "policy.file=$tmp/mlp_policy.lua" -s policy.on_error=stop "$@" >"$tmp/$name.log" 2>&1 ||
        { tail -n 40 "$tmp/$name.log" >&2; fail "the mlp run with a policy ($name) failed"; }
}
mlp_policy_run mlp_policy -s policy.params.bad_at=0
reason=$(grep -o '"stop_reason": "[^"]*"' "$tmp/mlp_policy/result.json")
[[ "$reason" == '"stop_reason": "policy: weights 3328, two-layer perceptron on communities"' ]] ||
    fail "mlp policy: $reason"
set +e
"$bivouac" run "$example/mlp-quickstart.yaml" --out "$tmp/mlp_policy_error" --quiet \
    -s "policy.file=$tmp/mlp_policy.lua" -s policy.on_error=stop -s policy.params.bad_at=2 \
    >"$tmp/mlp_policy_error.log" 2>&1
code=$?
set -e
[[ "$code" != 0 ]] || fail "mlp policy, failing export: the run exited 0"
line=$(grep 'policy error' "$tmp/mlp_policy_error.log")
[[ "$line" == "bivouac: error: run stopped: policy error: $tmp/mlp_policy.lua:4: model.mlp.weights: sizes must be at least 1, got 0, 4, 32" ]] ||
    fail "mlp policy, failing export: $line"

# gcn_run NAME ARGS...: gcn-quickstart.yaml (GCN, 100 epochs, cpu, zmq) with ARGS.
gcn_run() {
    local name=$1
    shift
    "$bivouac" run "$example/gcn-quickstart.yaml" --out "$tmp/$name" --quiet "$@" \
        >"$tmp/$name.log" 2>&1 ||
        { tail -n 40 "$tmp/$name.log" >&2; fail "bivouac run gcn-quickstart.yaml $* failed"; }
}

step "bivouac run gcn-quickstart.yaml: cpu + zmq (the reference), then with each example"
gcn_run reference
gcn_run statelog -s 'resilience=[{plugin: statelog}]'
gcn_run queue -s 'transport={plugin: queue}'
gcn_run naive -s 'compute={plugin: naive}'
python3 - "$tmp" <<'EOF' || fail "the example plugins' GCN runs are not as expected (see above)"
import json, sys
tmp = sys.argv[1]
runs = {n: json.load(open(f"{tmp}/{n}/result.json"))
        for n in ("reference", "statelog", "queue", "naive")}
ref = runs["reference"]
bad = []
for n, r in runs.items():
    if r["model"] != "gcn" or r["epochs"] != 100:
        bad.append(f"{n}: model {r['model']!r}, {r['epochs']} epochs; expected gcn, 100")

# statelog: one line per epoch. The graph engine's state is, per parameter (W0 300 x 16,
# W1 16 x 4: 4864 floats), the weights and Adam's m and v (3 blobs, 4 bytes a float),
# then optimizer/step and the training loop's run/units, run/lr, run/seed, run/wall,
# run/train_seconds, run/cost (8 bytes each), run/history (one 96-byte record per epoch so
# far), run/evals (empty: the graph engine has no periodic evaluation) and run/costs (8
# bytes per epoch so far): 16 blobs, 58424 + 104 E bytes after epoch E.
want = [f"epoch {e} blobs 16 bytes {3 * 4 * 4864 + 7 * 8 + 104 * e}" for e in range(1, 101)]
got = open(f"{tmp}/statelog/statelog.txt").read().splitlines()
if got == want:
    print(f"statelog: statelog.txt is '{want[0]}' .. '{want[-1]}'")
else:
    i = next(i for i in range(max(len(got), len(want)))
             if i >= len(got) or i >= len(want) or got[i] != want[i])
    bad.append(f"statelog.txt has {len(got)} lines, expected 100; line {i + 1} is "
               f"{got[i] if i < len(got) else None!r}, "
               f"expected {want[i] if i < len(want) else None!r}")

# statelog only watches and queue only carries messages: the weights are the reference's.
for n in ("statelog", "queue"):
    if runs[n]["params_crc32c"] == ref["params_crc32c"]:
        print(f"{n}: params_crc32c {ref['params_crc32c']}, as with cpu + zmq")
    else:
        bad.append(f"{n}: params_crc32c {runs[n]['params_crc32c']}, the cpu + zmq run "
                   f"gives {ref['params_crc32c']}")

# naive sums in another order than OpenBLAS: close, not bit-identical.
acc, ref_acc = runs["naive"]["test_accuracy"], ref["test_accuracy"]
if abs(acc - ref_acc) <= 0.02:
    print(f"naive: test_accuracy {acc:.3f}, cpu {ref_acc:.3f}")
else:
    bad.append(f"naive: test_accuracy {acc}, the cpu run's is {ref_acc} (more than 0.02 off)")

for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

step "GAT on naive (ABI 1.0 kernels only) is refused before it runs, not crashed on"
set +e
"$bivouac" run "$example/gcn-quickstart.yaml" --out "$tmp/gat-naive" --quiet \
    -s 'model={plugin: gat}' -s 'compute={plugin: naive}' >"$tmp/gat-naive.out" \
    2>"$tmp/gat-naive.err"
code=$?
set -e
want="bivouac: error: compute plugin 'naive' has no edge kernels (plugin ABI 1.1), which model 'gat' needs for stage AE0"
[[ $code == 2 ]] || fail "GAT on naive exited $code, want 2: $(cat "$tmp/gat-naive.err")"
[[ $(cat "$tmp/gat-naive.err") == "$want" ]] ||
    fail "GAT on naive said '$(cat "$tmp/gat-naive.err")', want '$want'"
[[ ! -e $tmp/gat-naive/result.json ]] || fail "GAT on naive wrote a result.json"
echo "refused: $want"

# refused NAME WANT ARGS...: bivouac run ARGS must exit 2 saying exactly WANT, writing no
# result.json.
refused() {
    local name=$1 want=$2
    shift 2
    set +e
    "$bivouac" run "$@" --out "$tmp/$name" --quiet >"$tmp/$name.out" 2>"$tmp/$name.err"
    local code=$?
    set -e
    [[ $code == 2 ]] || fail "$name exited $code, want 2: $(cat "$tmp/$name.err")"
    [[ $(cat "$tmp/$name.err") == "$want" ]] ||
        fail "$name said '$(cat "$tmp/$name.err")', want '$want'"
    [[ ! -e $tmp/$name/result.json ]] || fail "$name wrote a result.json"
    echo "refused: $want"
}

step "feature_storage: sparse where the model or the back end cannot take sparse features"
# the runs above with auto got them dense (naive has no spmm_dropout; mlp's first stage
# does not set sparse_input): the logs say so
grep -q "features made dense (1.2 MB) for model 'gcn' on compute 'naive'" "$tmp/naive.log" ||
    fail "the naive run's log does not say its features were made dense"
refused naive-sparse "bivouac: error: dataset.feature_storage: sparse, but model 'gcn' on compute 'naive' cannot use them: the compute plugin has no sparse first-layer kernels (spmm_dropout)" \
    "$example/gcn-quickstart.yaml" -s 'compute={plugin: naive}' \
    -s dataset.feature_storage=sparse
refused mlp-sparse "bivouac: error: dataset.feature_storage: sparse, but model 'mlp' on compute 'cpu' cannot use them: its first stage does not take sparse features (bv_stage.sparse_input)" \
    "$example/mlp-quickstart.yaml" -s dataset.feature_storage=sparse

echo "PASS"
