#!/usr/bin/env bash
# Hostile input and operator mistakes (issue 18, classes 3 and 7; docs/limits.md): files
# that are not regular files, inputs over a size or node limit, allocation failures,
# experiment names that are paths, quoted numbers, unknown YAML tags, lists where a
# single value goes, a checkpoint directory that is a device. Each is refused with exit 2
# (1 for out of memory), the exact message, and nothing written.
# Fixtures: tests/data/experiments/*.yaml. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
# Nothing here may block: a command that reads a FIFO or a device would hang or fill memory.
T=(timeout 60)

# ---- class 3: regular files only, bounded sizes, one clear error ----------------------

t "/dev/zero as the experiment file is refused, not read"
expect_fail 2 "error: /dev/zero is not a regular file (a character device)
/dev/zero: 1 error" "${T[@]}" "$B" check /dev/zero

t "run on /dev/zero exits 2 and writes nothing"
expect_run_fail 2 "error: /dev/zero is not a regular file (a character device)" /dev/zero

t "a directory as the experiment file"
expect_fail 2 "error: $EXP is not a regular file (a directory)
$EXP: 1 error" "${T[@]}" "$B" check "$EXP"

t "a FIFO as the experiment file is refused at once, without waiting for a writer"
mkfifo "$tmp/fifo.yaml"
expect_fail 2 "error: $tmp/fifo.yaml is not a regular file (a FIFO)
$tmp/fifo.yaml: 1 error" "${T[@]}" "$B" check "$tmp/fifo.yaml"

t "a FIFO as the policy file"
mkdir "$tmp/fifo_policy"
mkfifo "$tmp/fifo_policy/policy.lua"
printf 'model: {plugin: gcn}\ndataset: {name: cora}\npolicy: {file: policy.lua}\n' \
    >"$tmp/fifo_policy/exp.yaml"
f="$tmp/fifo_policy/exp.yaml"
expect_fail 2 "$f:3:16: error: $tmp/fifo_policy/policy.lua is not a regular file (a FIFO)
$f: 1 error" "${T[@]}" "$B" check "$f"
expect_run_fail 2 "$f:3:16: error: $tmp/fifo_policy/policy.lua is not a regular file (a FIFO)" "$f"

t "a directory as the policy file"
f="$EXP/policy_directory.yaml"
expect_fail 2 "$f:4:16: error: $EXP/. is not a regular file (a directory)
$f: 1 error" "${T[@]}" "$B" check "$f"

t "a FIFO as dataset.text"
mkdir "$tmp/fifo_text"
mkfifo "$tmp/fifo_text/input.txt"
printf 'model: {plugin: transformer, layers: 1, heads: 1, width: 8}\ndataset: {text: input.txt}\n' \
    >"$tmp/fifo_text/exp.yaml"
f="$tmp/fifo_text/exp.yaml"
expect_fail 2 "$f:2:17: error: $tmp/fifo_text/input.txt is not a regular file (a FIFO)
$f: 1 error" "${T[@]}" "$B" check "$f"
expect_run_fail 2 "$f:2:17: error: $tmp/fifo_text/input.txt is not a regular file (a FIFO)" "$f"

t "a directory as dataset.text"
f="$EXP/text_directory.yaml"
expect_fail 2 "$f:3:17: error: $EXP/. is not a regular file (a directory)
$f: 1 error" "${T[@]}" "$B" check "$f"

t "a config over BIVOUAC_MAX_CONFIG_BYTES is refused before it is parsed"
f="$tmp/big.yaml"
cat "$EXP/base.yaml" >"$f"
for _ in $(seq 40); do echo "# padding padding padding padding padding padding" >>"$f"; done
size=$(stat -c %s "$f")
expect_fail 2 "error: $f is larger than $((size - 1)) bytes, the limit for a config file (set BIVOUAC_MAX_CONFIG_BYTES to raise it)
$f: 1 error" env BIVOUAC_MAX_CONFIG_BYTES=$((size - 1)) "$B" check "$f"

t "a config of exactly BIVOUAC_MAX_CONFIG_BYTES is read"
expect_exit 0 "" env BIVOUAC_MAX_CONFIG_BYTES="$size" "$B" check "$f"

t "run on a config over the limit exits 2 and writes nothing"
BIVOUAC_MAX_CONFIG_BYTES=100 expect_run_fail 2 "error: $f is larger than 100 bytes, the limit for a config file (set BIVOUAC_MAX_CONFIG_BYTES to raise it)" "$f"

t "a limit that is not a number names the variable"
f="$EXP/base.yaml"
expect_fail 2 "error: BIVOUAC_MAX_CONFIG_BYTES must be a positive whole number, got '16M'
$f: 1 error" env BIVOUAC_MAX_CONFIG_BYTES=16M "$B" check "$f"

t "more values than BIVOUAC_MAX_CONFIG_NODES: reported where the limit is passed"
expect_fail 2 "$f:5:17: error: more than 10 YAML values, the limit for a config (set BIVOUAC_MAX_CONFIG_NODES to raise it)
$f: 1 error" env BIVOUAC_MAX_CONFIG_NODES=10 "$B" check "$f"
expect_exit 0 "" env BIVOUAC_MAX_CONFIG_NODES=13 "$B" check "$f"

t "the default node limit: a 4 MB list of a million values stops at the limit"
f="$tmp/million.yaml"
awk 'BEGIN { print "x:"; for (i = 0; i <= 1000000; i++) print "- 1" }' >"$f"
expect_fail 2 "$f:1000000:3: error: more than 1000000 YAML values, the limit for a config (set BIVOUAC_MAX_CONFIG_NODES to raise it)
$f: 1 error" "${T[@]}" "$B" check "$f"

t "dataset.text over BIVOUAC_MAX_TEXT_BYTES (43 bytes against 42)"
f="$EXP/text_short.yaml"
expect_fail 2 "$f:3:17: error: $EXP/../transformer/short.txt is larger than 42 bytes, the limit for a text dataset (set BIVOUAC_MAX_TEXT_BYTES to raise it)
$f: 1 error" env BIVOUAC_MAX_TEXT_BYTES=42 "$B" check "$f"
expect_exit 0 "" env BIVOUAC_MAX_TEXT_BYTES=43 "$B" check "$f"

t "an allocation failure is reported with exit 1, never as '0 errors'"
f="$EXP/base.yaml"
expect_fail 1 "error: out of memory while loading $f
$f: 1 error" env BIVOUAC_FAULT_ALLOC_FAIL_AFTER=0 "$B" check "$f"
expect_fail 1 "error: out of memory while reading $f
$f: 1 error" env BIVOUAC_FAULT_ALLOC_FAIL_AFTER=20 "$B" check "$f"
BIVOUAC_FAULT_ALLOC_FAIL_AFTER=0 expect_run_fail 1 "error: out of memory while loading $f" "$f"

t "every allocation failure while checking an experiment is reported (each 5th tried)"
bad=""
for n in $(seq 0 5 400); do
    capture env BIVOUAC_FAULT_ALLOC_FAIL_AFTER="$n" "$B" check "$f"
    [[ $rc == 0 ]] && break
    if [[ $rc != 1 ]] || ! grep -q "^error: out of memory" "$tmp/stderr" ||
        grep -q ": 0 errors$" "$tmp/stderr"; then
        bad+=" $n(exit $rc)"
    fi
done
if [[ -z $bad && $rc == 0 ]]; then
    passed=$((passed + 1))
    echo "ok   - $label"
else
    failed=$((failed + 1))
    echo "FAIL - $label: wrong outcome after allocation${bad:- (never finished)}"
fi

# ---- class 7: lax validation ------------------------------------------------------------

t "an experiment name that is a path is refused at 'name:'"
f="$EXP/name_traversal.yaml"
expect_fail 2 "$f:2:7: error: 'name' must be a plain name of at most 64 letters, digits, '-', '_' and '.', not starting with '.' (it names the run directory), got '../../../../elsewhere/x'
$f: 1 error" "$B" check "$f"

t "run without --out on a name that is a path writes nothing anywhere"
expect_fail 2 "$f:2:7: error: 'name' must be a plain name of at most 64 letters, digits, '-', '_' and '.', not starting with '.' (it names the run directory), got '../../../../elsewhere/x'" \
    "$B" run "$f" --quiet
if [[ -n $(ls -A "$work") || -e $tmp/elsewhere ]]; then
    failed=$((failed + 1))
    echo "FAIL - run left $(ls -A "$work") in the working directory"
fi

t "a name of 65 characters, or starting with '.', is refused; 64 is fine"
f="$EXP/base.yaml"
long=$(printf 'n%.0s' $(seq 65))
expect_fail 2 "<command line>:1:6: error: 'name' must be a plain name of at most 64 letters, digits, '-', '_' and '.', not starting with '.' (it names the run directory), got '$long'
$f: 1 error" "$B" check "$f" -s "name=$long"
expect_fail 2 "<command line>:1:6: error: 'name' must be a plain name of at most 64 letters, digits, '-', '_' and '.', not starting with '.' (it names the run directory), got '.hidden'
$f: 1 error" "$B" check "$f" -s name=.hidden
expect_exit 0 "" "$B" check "$f" -s "name=${long:1}"

t "a list where the name goes"
f="$EXP/name_list.yaml"
expect_fail 2 "$f:2:7: error: expected a string for 'name', got a list
$f: 1 error" "$B" check "$f"

t "lists and mappings where a string, a path or a choice goes"
f="$EXP/string_list.yaml"
expect_fail 2 "$f:3:17: error: expected a string for 'name', got a list
$f:4:16: error: expected a string for 'file', got a mapping
$f:4:34: error: expected one of continue|stop for 'on_error', got a list
$f: 3 errors" "$B" check "$f"

t "quoted numbers are strings, not numbers"
f="$EXP/quoted_number.yaml"
expect_fail 2 "$f:2:30: error: expected an integer for 'hidden', got the string \"16\"
$f:2:45: error: expected a number for 'dropout', got the string \"0.5\"
$f:4:17: error: expected an integer for 'epochs', got the string \"2\"
$f: 3 errors" "$B" check "$f"

t "-s values are plain: the same numbers from the command line are numbers"
expect_exit 0 "" "$B" check "$f" -s model.hidden=16 -s model.dropout=0.5 -s train.epochs=2

t "tags beyond YAML's core schema, or on the wrong kind of node, are refused where they are"
f="$EXP/tags.yaml"
expect_fail 2 "$f:2:7: error: unsupported YAML tag '!!python/object:os.system' (only !!str, !!int, !!float, !!bool, !!null, !!map and !!seq)
$f:3:8: error: unsupported YAML tag '!custom' (only !!str, !!int, !!float, !!bool, !!null, !!map and !!seq)
$f:5:8: error: YAML tag '!!seq' does not fit a mapping
$f: 3 errors" "$B" check "$f"

t "a checkpoint directory that is a device is refused by check"
f="$EXP/checkpoint_dir_file.yaml"
expect_fail 2 "$f:4:40: error: /dev/null is not a directory (a character device)
$f: 1 error" "$B" check "$f"
expect_run_fail 2 "$f:4:40: error: /dev/null is not a directory (a character device)" "$f"

t "a graph dataset path that names a file"
f="$EXP/dataset_path_file.yaml"
expect_fail 2 "$f:3:17: error: $EXP/base.yaml is not a directory (a regular file)
$f: 1 error" "$B" check "$f"

t "cluster hosts: other hosts need links over tcp, HOST@ADDRESS, no more than the roles"
f="$tmp/hosts.yaml"
cat >"$f" <<'EOF'
model: {plugin: gcn}
dataset: {name: cora}
cluster: {graph_servers: 2, graph_server_hosts: "ns-a@10.0.0.1"}
cloud: {plugin: local}
EOF
expect_fail 2 "$f:3:49: error: 'graph_server_hosts' places roles on other hosts, which needs 'links: tcp' (links: ipc is one host)
$f: 1 error" "$B" check "$f"
cat >"$f" <<'EOF'
model: {plugin: gcn}
dataset: {name: cora}
cluster: {links: tcp, graph_servers: 2, graph_server_hosts: "ns-a@10.0.0.1, 10.0.0.2",
          param_server_hosts: "a@10.0.0.1, b@10.0.0.2"}
cloud: {plugin: local}
EOF
expect_fail 2 "$f:3:61: error: 'graph_server_hosts': '10.0.0.2' is not HOST@ADDRESS (a network namespace and its IPv4 address, e.g. ns-a@10.0.0.1)
$f:4:31: error: 'param_server_hosts' places 2 roles, but the cluster has 1 param_servers
$f: 2 errors" "$B" check "$f"

finish
