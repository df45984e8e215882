#!/usr/bin/env bash
# A policy's set-up (its top level) runs once per run, as docs/policies.md says: `run`
# hands the policy that validation set up to the training loop instead of setting it up
# again; each further seed of --repeat gets a fresh policy, so once per seed; `check`
# sets it up once. Fixture: tests/data/experiments/policy_setup_log.{yaml,lua}, whose
# set-up logs one line. Environment: see bad_lib.bash.
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
f="$EXP/policy_setup_log.yaml"
setup="bivouac: info: policy: set up with patience 3"
epochs="bivouac: info: policy: epoch 1
bivouac: info: policy: epoch 2"

t "run: the set-up line once, then one line per epoch"
expect_exit 0 "$setup
$epochs" "$B" run "$f" --out "$tmp/one" --quiet

t "run --repeat 2: set-up once per seed, each seed with a fresh policy"
expect_exit 0 "$setup
$epochs
$setup
$epochs" "$B" run "$f" --out "$tmp/two" --quiet --repeat 2

t "check: the set-up line once"
expect_exit 0 "$setup" "$B" check "$f"

finish
