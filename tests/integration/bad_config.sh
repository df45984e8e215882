#!/usr/bin/env bash
# Bad experiment files and -s overrides: `bivouac check` and `bivouac run` print every
# problem as file:line:col: error: ..., exit 2, and write nothing.
# Fixtures: tests/data/experiments/*.yaml. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC

t "a valid experiment checks clean (the fixtures below differ from it in one way)"
expect_exit 0 "" "$B" check "$EXP/base.yaml"

t "unknown key with a did-you-mean"
f="$EXP/unknown_key_hint.yaml"
expect_fail 2 "$f:4:3: error: unknown key 'hiden' in section 'model'; did you mean 'hidden'?
$f: 1 error" "$B" check "$f"

t "unknown key without a suggestion"
f="$EXP/unknown_key_nohint.yaml"
expect_fail 2 "$f:6:3: error: unknown key 'colour' in section 'train'
$f: 1 error" "$B" check "$f"

t "a list where an integer goes"
f="$EXP/wrong_type_list.yaml"
expect_fail 2 "$f:2:30: error: expected an integer for 'hidden', got a list
$f: 1 error" "$B" check "$f"

t "a word where an integer goes"
f="$EXP/wrong_type_word.yaml"
expect_fail 2 "$f:4:11: error: expected an integer for 'hidden', got 'abc'
$f: 1 error" "$B" check "$f"

t "a value out of range"
f="$EXP/out_of_range.yaml"
expect_fail 2 "$f:2:31: error: 'dropout' must be in [0, 0.99], got 1.5
$f: 1 error" "$B" check "$f"

t "unknown plugin with a did-you-mean"
f="$EXP/unknown_plugin_hint.yaml"
expect_fail 2 "$f:2:17: error: unknown model plugin 'gcm'; did you mean 'gcn'?
$f: 1 error" "$B" check "$f"

t "unknown plugin without a suggestion names the directories searched"
f="$EXP/unknown_plugin_nohint.yaml"
expect_fail 2 "$f:2:17: error: unknown model plugin 'zzyzx' (searched $BIVOUAC_PLUGIN_PATH)
$f: 1 error" "$B" check "$f"

t "unknown top-level sections, with and without a suggestion"
f="$EXP/unknown_section.yaml"
expect_fail 2 "$f:4:1: error: unknown section 'trian'; did you mean 'train'?
$f:5:1: error: unknown section 'zebra'
$f: 2 errors" "$B" check "$f"

t "dataset name with no directory under BIVOUAC_DATA_DIR"
f="$EXP/missing_dataset.yaml"
expect_fail 2 "$f:3:17: error: dataset 'nosuch' not found: $BIVOUAC_DATA_DIR/nosuch is not a directory
$f: 1 error" "$B" check "$f"

t "dataset name with BIVOUAC_DATA_DIR unset says to set it"
expect_fail 2 "$f:3:17: error: dataset 'nosuch' not found: data/nosuch is not a directory (set BIVOUAC_DATA_DIR)
$f: 1 error" env -u BIVOUAC_DATA_DIR "$B" check "$f"

t "dataset path (relative to the experiment file) that does not exist"
f="$EXP/missing_dataset_path.yaml"
expect_fail 2 "$f:3:17: error: dataset directory $EXP/no/such/dir does not exist
$f: 1 error" "$B" check "$f"

t "malformed YAML: a key indented deeper than its sibling"
f="$EXP/bad_indent.yaml"
expect_fail 2 "$f:4:11: error: invalid YAML: mapping values are not allowed in this context
$f: 1 error" "$B" check "$f"

t "malformed YAML: a key indented less than its sibling"
f="$EXP/bad_dedent.yaml"
expect_fail 2 "$f:4:2: error: invalid YAML: did not find expected key (while parsing a block mapping)
$f: 1 error" "$B" check "$f"

t "malformed YAML: an unclosed bracket"
f="$EXP/unclosed_bracket.yaml"
expect_fail 2 "$f:2:37: error: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)
$f: 1 error" "$B" check "$f"

t "a duplicate section"
f="$EXP/duplicate_key.yaml"
expect_fail 2 "$f:4:1: error: duplicate key 'model'
$f: 1 error" "$B" check "$f"

t "an experiment file that does not exist"
expect_fail 2 "$tmp/nosuch.yaml: error: cannot read: No such file or directory
$tmp/nosuch.yaml: 1 error" "$B" check "$tmp/nosuch.yaml"

t "check reports all five errors of three sections, in file order"
f="$EXP/many_errors.yaml"
expect_fail 2 "$f:4:3: error: unknown key 'hiden' in section 'model'; did you mean 'hidden'?
$f:5:12: error: 'dropout' must be in [0, 0.99], got 1.5
$f:6:17: error: dataset 'nosuch' not found: $BIVOUAC_DATA_DIR/nosuch is not a directory
$f:7:17: error: expected an integer for 'epochs', got a list
$f:7:29: error: expected a number for 'lr', got 'abc'
$f: 5 errors" "$B" check "$f"

t "check reports errors in file order when unknown sections come first"
f="$EXP/many_errors_unsorted.yaml"
expect_fail 2 "$f:2:1: error: unknown section 'zebra'
$f:3:22: error: unknown key 'hiden' in section 'model'; did you mean 'hidden'?
$f:4:1: error: unknown section 'trian'; did you mean 'train'?
$f: 3 errors" "$B" check "$f"

t "-s with a value out of range points into the command line"
f="$EXP/base.yaml"
expect_fail 2 "<command line>:1:15: error: 'dropout' must be in [0, 0.99], got 1.5
$f: 1 error" "$B" check "$f" -s model.dropout=1.5

t "-s with a misspelt key and a word for a number: both reported"
expect_fail 2 "<command line>:1:7: error: unknown key 'hiden' in section 'model'; did you mean 'hidden'?
<command line>:1:10: error: expected a number for 'lr', got 'fast'
$f: 2 errors" "$B" check "$f" -s model.hiden=8 -s train.lr=fast

t "-s that names a plugin that does not exist"
expect_fail 2 "<command line>:1:16: error: unknown compute plugin 'gpu'; did you mean 'cpu'?
$f: 1 error" "$B" check "$f" -s compute.plugin=gpu

t "-s without '='"
expect_fail 2 "<command line>:1:1: error: override 'epochs' must look like key.path=value
$f: 1 error" "$B" check "$f" -s epochs

t "-s with an integer range printed as an integer"
expect_fail 2 "<command line>:1:12: error: 'seed' must be in [0, 9007199254740992], got -1
$f: 1 error" "$B" check "$f" -s train.seed=-1

t "run on a bad config exits 2 and writes nothing"
f="$EXP/many_errors.yaml"
expect_run_fail 2 "$f:4:3: error: unknown key 'hiden' in section 'model'; did you mean 'hidden'?
$f:5:12: error: 'dropout' must be in [0, 0.99], got 1.5
$f:6:17: error: dataset 'nosuch' not found: $BIVOUAC_DATA_DIR/nosuch is not a directory
$f:7:17: error: expected an integer for 'epochs', got a list
$f:7:29: error: expected a number for 'lr', got 'abc'" "$f"

t "run with a -s out of range exits 2 and writes nothing"
expect_run_fail 2 "<command line>:1:15: error: 'dropout' must be in [0, 0.99], got 1.5" \
    "$EXP/base.yaml" -s train.epochs=2 -s model.dropout=1.5

t "run on malformed YAML exits 2 and writes nothing"
f="$EXP/unclosed_bracket.yaml"
expect_run_fail 2 "$f:2:37: error: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)" "$f"

t "run without --out on a bad config creates no runs/ directory"
f="$EXP/out_of_range.yaml"
expect_fail 2 "$f:2:31: error: 'dropout' must be in [0, 0.99], got 1.5" "$B" run "$f" --quiet
if [[ -n $(ls -A "$work") ]]; then
    failed=$((failed + 1))
    echo "FAIL - run without --out left $(ls -A "$work") in the working directory"
    rm -rf "${work:?}"/*
fi

t "run with a missing policy script exits 2 and writes nothing"
f="$EXP/policy_missing.yaml"
expect_run_fail 2 "$f:4:16: error: policy file $EXP/no_such_policy.lua cannot be read: No such file or directory" "$f"

t "GAT: hidden not divisible by heads is a config error at the option"
f="$EXP/gat_heads.yaml"
expect_run_fail 2 "$f:2:40: error: 'hidden' (64) must be a multiple of 'heads' (5): each head gets hidden / heads units" "$f"

t "GAT: a head count out of range"
f="$EXP/gat_zero_heads.yaml"
expect_fail 2 "$f:2:29: error: 'heads' must be in [1, 64], got 0
$f: 1 error" "$B" check "$f"

t "--help after a command prints the usage on stdout and exits 0"
for cmd in run check plugins sample; do
    capture "$B" "$cmd" --help
    if [[ $rc -eq 0 && ! -s $tmp/stderr ]] && head -1 "$tmp/stdout" | grep -qx 'usage: bivouac <command> \[options\]'; then
        passed=$((passed + 1))
    else
        echo "FAIL: $label ($cmd: exit $rc)"
        failed=$((failed + 1))
    fi
done

t "an unknown option of run names it"
expect_fail 2 "bivouac: error: unknown option '--hepl' (see bivouac --help)" "$B" run --hepl

finish
