#!/usr/bin/env bash
# Broken plugins (tests/plugins, built into $BIVOUAC_BUILD_DIR/test-plugins/<case>/): an
# experiment that names one fails with the registry's reason and the file's path, exit 2,
# nothing written; `bivouac plugins` lists each under "not loaded:"; a good experiment is
# not disturbed by broken plugins on the path. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
plugins=$BIVOUAC_PLUGIN_PATH
tp="$BIVOUAC_BUILD_DIR/test-plugins"
[[ -f $tp/badabi/model_badabi.so ]] ||
    { echo "FAIL: no test plugins in $tp (tests/plugins not built?)"; exit 1; }
tp=$(realpath "$tp")
# The version this bivouac speaks, from the header it was built with.
hdr="$BIVOUAC_SOURCE_DIR/core/include/bivouac/plugin.h"
abi="$(sed -n 's/^#define BV_ABI_MAJOR \([0-9]*\).*/\1/p' "$hdr").$(sed -n 's/^#define BV_ABI_MINOR \([0-9]*\).*/\1/p' "$hdr")"
[[ $abi =~ ^[0-9]+\.[0-9]+$ ]] || { echo "FAIL: no BV_ABI_MAJOR/MINOR in $hdr"; exit 1; }
# The smallest model ops table the registry accepts changes with the ABI, so the checks
# mask it as <N> (in stdout too, for `bivouac plugins`).
mask_ops='s/a model plugin needs [0-9]+$/a model plugin needs <N>/'
stderr_filter=$mask_ops

# expect_plugin_fail CASE "reason": check and run of plugin_CASE.yaml, with only that
# case's directory in front of the build's plugins.
expect_plugin_fail() {
    local c=$1 reason=$2 f="$EXP/plugin_$1.yaml"
    t "$c: check names the file and the reason"
    BIVOUAC_PLUGIN_PATH="$tp/$c:$plugins" \
        expect_fail 2 "$f:2:17: error: $reason
$f: 1 error" "$B" check "$f"
    t "$c: run exits 2 and writes nothing"
    BIVOUAC_PLUGIN_PATH="$tp/$c:$plugins" \
        expect_run_fail 2 "$f:2:17: error: $reason" "$f"
}

expect_plugin_fail badabi \
    "$tp/badabi/model_badabi.so: built for plugin ABI 9.0, this bivouac speaks $abi"
expect_plugin_fail noentry \
    "$tp/noentry/model_noentry.so: missing entry symbol bv_model_noentry_plugin"
expect_plugin_fail mismatch \
    "$tp/mismatch/model_mismatch.so: descriptor says model 'other', the file name says model 'mismatch'"
expect_plugin_fail undefined \
    "cannot load $tp/undefined/model_undefined.so: undefined symbol: bv_test_symbol_nobody_defines"
expect_plugin_fail incomplete \
    "$tp/incomplete/model_incomplete.so: ops table is 8 bytes, a model plugin needs <N>"
expect_plugin_fail noprobe "model plugin 'noprobe' cannot run here: no test accelerator here"
# ABI 1.4: a newer minor is refused; a model names its engine in the descriptor.
major=${abi%%.*}
newer="$major.$((${abi#*.} + 1))"
newabi_why="$tp/newabi/model_newabi.so: built for plugin ABI $newer, newer than this bivouac's $abi; rebuild it against this SDK or use a newer bivouac"
badengine_why="$tp/badengine/model_badengine.so: model plugin declares engine 'tpu'; this bivouac has graph, sequence"
noengine_why="$tp/noengine/model_noengine.so: model plugin declares no engine; set .engine to \"graph\" or \"sequence\" in its descriptor"
expect_plugin_fail newabi "$newabi_why"
expect_plugin_fail badengine "$badengine_why"
expect_plugin_fail noengine "$noengine_why"
# ABI 1.5: an export's signature is checked at load; a pointer never reaches a policy.
badexport_why="$tp/badexport/model_badexport.so: export 'peek' has a malformed signature 'i:ip': unknown argument type 'p' at position 4 (expected one of idbs)"
expect_plugin_fail badexport "$badexport_why"
# No `cloud:` section in experiments yet, so the cloud cases are checked through
# `bivouac plugins` below.
nullops_why="$tp/nullops/cloud_nullops.so: descriptor has no ops table"
short_why="$tp/short/cloud_short.so: ops table is 8 bytes, a cloud plugin needs <N>"
mask_ops='s/a (model|cloud) plugin needs [0-9]+$/a \1 plugin needs <N>/'
stderr_filter=$mask_ops

t "a model built against the ABI 1.3 headers loads, reads its options and trains"
f="$EXP/plugin_abi13.yaml"
: >"$why"
s=0
rm -rf "$tmp/abi13"
BIVOUAC_PLUGIN_PATH="$tp/abi13:$plugins" capture "$B" run "$f" --out "$tmp/abi13" --quiet
[[ $rc == 0 ]] || { echo "exit status $rc, expected 0" >>"$why"; cat "$tmp/stderr" >>"$why"; s=1; }
jq -e '.model == "abi13" and .epochs == 30 and .test_accuracy > 0.5' \
    "$tmp/abi13/result.json" >/dev/null 2>&1 ||
    { echo "result.json missing or wrong:" >>"$why"; cat "$tmp/abi13/result.json" >>"$why" 2>&1; s=1; }
BIVOUAC_PLUGIN_PATH="$tp/abi13:$plugins" capture "$B" plugins --json
jq -r '.plugins[] | select(.name == "abi13") | "\(.loaded) \(.abi) \(.engine) \(.options[0].name)"' \
    "$tmp/stdout" >"$tmp/stderr" 2>&1
stderr_is "true 1.3 graph note" || s=1
report $s "$B" run "$f"

t "bivouac plugins lists a valid cloud plugin with its options"
BIVOUAC_PLUGIN_PATH="$tp/minimal:$plugins" capture "$B" plugins
: >"$why"
s=0
[[ $rc == 0 ]] || { echo "exit status $rc, expected 0" >>"$why"; s=1; }
grep -A2 '^cloud minimal' "$tmp/stdout" | sed -E 's/ +/ /g' >"$tmp/stderr"
stderr_is "cloud minimal 0.0.1 test: the smallest valid cloud
 file: $tp/minimal/cloud_minimal.so
 nodes int 1 [1, 64] most nodes at once" || s=1
report $s "$B" plugins

t "bivouac plugins says which plugin cannot run here, and why (its probe)"
BIVOUAC_PLUGIN_PATH="$tp/noprobe:$plugins" capture "$B" plugins
: >"$why"
s=0
[[ $rc == 0 ]] || { echo "exit status $rc, expected 0" >>"$why"; s=1; }
grep -A2 '^model noprobe' "$tmp/stdout" | tail -1 >"$tmp/stderr"
stderr_is "    cannot run here: no test accelerator here" || s=1
BIVOUAC_PLUGIN_PATH="$tp/noprobe:$plugins" capture "$B" plugins --json
jq -r '.plugins[] | select(.name == "noprobe" or .name == "gcn") | "\(.name) \(.runs_here) \(.why)"' \
    "$tmp/stdout" >"$tmp/stderr" 2>&1
stderr_is "noprobe false no test accelerator here
gcn true null" || s=1
report $s "$B" plugins

all="$tp/badabi:$tp/noentry:$tp/mismatch:$tp/undefined:$tp/incomplete:$tp/noprobe"
all="$all:$tp/newabi:$tp/badengine:$tp/noengine:$tp/badexport:$tp/nullops:$tp/short:$tp/minimal"
all="$all:$plugins"

t "a file that is not a shared object: dlopen's reason is kept"
mkdir -p "$tmp/garbage"
# longer than an ELF header, so the loader reads the magic rather than "file too short"
printf 'not an ELF file%.0s\n' {1..10} >"$tmp/garbage/model_garbage.so"
printf 'model: {plugin: garbage}\ndataset: {name: cora}\n' >"$tmp/garbage.yaml"
BIVOUAC_PLUGIN_PATH="$tmp/garbage:$plugins" \
    expect_fail 2 "$tmp/garbage.yaml:1:17: error: cannot load $tmp/garbage/model_garbage.so: invalid ELF header
$tmp/garbage.yaml: 1 error" "$B" check "$tmp/garbage.yaml"

t "bivouac plugins lists every broken plugin under 'not loaded:', in path order"
BIVOUAC_PLUGIN_PATH="$all" capture "$B" plugins
: >"$why"
s=0
[[ $rc == 0 ]] || { echo "exit status $rc, expected 0" >>"$why"; s=1; }
[[ -s $tmp/stderr ]] && { echo "stderr not empty:" >>"$why"; cat "$tmp/stderr" >>"$why"; s=1; }
sed -n '/^not loaded:$/,$p' "$tmp/stdout" | sed -E "$mask_ops" >"$tmp/stderr" # for stderr_is
stderr_is "not loaded:
  $tp/badabi/model_badabi.so: built for plugin ABI 9.0, this bivouac speaks $abi
  $tp/noentry/model_noentry.so: missing entry symbol bv_model_noentry_plugin
  $tp/mismatch/model_mismatch.so: descriptor says model 'other', the file name says model 'mismatch'
  cannot load $tp/undefined/model_undefined.so: undefined symbol: bv_test_symbol_nobody_defines
  $tp/incomplete/model_incomplete.so: ops table is 8 bytes, a model plugin needs <N>
  $newabi_why
  $badengine_why
  $noengine_why
  $badexport_why
  $nullops_why
  $short_why" || s=1
report $s "$B" plugins

t "bivouac plugins --json marks each broken plugin loaded: false with its reason"
BIVOUAC_PLUGIN_PATH="$all" capture "$B" plugins --json
: >"$why"
s=0
[[ $rc == 0 ]] || { echo "exit status $rc, expected 0" >>"$why"; s=1; }
jq -r '.plugins[] | select(.loaded == false) | "\(.kind) \(.name): \(.error)"' \
    "$tmp/stdout" 2>&1 | sed -E "$mask_ops" >"$tmp/stderr" || { echo "not JSON" >>"$why"; s=1; }
stderr_is "model badabi: $tp/badabi/model_badabi.so: built for plugin ABI 9.0, this bivouac speaks $abi
model noentry: $tp/noentry/model_noentry.so: missing entry symbol bv_model_noentry_plugin
model mismatch: $tp/mismatch/model_mismatch.so: descriptor says model 'other', the file name says model 'mismatch'
model undefined: cannot load $tp/undefined/model_undefined.so: undefined symbol: bv_test_symbol_nobody_defines
model incomplete: $tp/incomplete/model_incomplete.so: ops table is 8 bytes, a model plugin needs <N>
model newabi: $newabi_why
model badengine: $badengine_why
model noengine: $noengine_why
model badexport: $badexport_why
cloud nullops: $nullops_why
cloud short: $short_why" || s=1
report $s "$B" plugins --json

t "broken plugins on the path do not disturb an experiment that does not name them"
BIVOUAC_PLUGIN_PATH="$all" expect_exit 0 "" "$B" check "$EXP/base.yaml"

t "a misspelt plugin name is matched only against plugins that loaded"
f="$EXP/unknown_plugin_nohint.yaml"
BIVOUAC_PLUGIN_PATH="$all" expect_fail 2 "$f:2:17: error: unknown model plugin 'zzyzx' (searched $all)
$f: 1 error" "$B" check "$f"

finish
