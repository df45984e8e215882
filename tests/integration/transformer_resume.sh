#!/usr/bin/env bash
# A transformer run killed after step 25 and resumed from its newest checkpoint gives the
# same loss curve (metrics.jsonl, "seconds" aside) and the same final weights as the
# uninterrupted run with the same seed; a second uninterrupted run is identical too; and
# `bivouac sample` generates the same text from the final checkpoint twice.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-tf-resume.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

curve() { sed -e 's/, "seconds": [^}]*//' "$1/metrics.jsonl"; }
field() { grep -o "\"$2\": [^,}]*" "$1/result.json"; }

"$BIVOUAC" run "$exp" --out "$tmp/a" --quiet
"$BIVOUAC" run "$exp" --out "$tmp/b" --quiet
set +e
BIVOUAC_FAULT_KILL_AFTER_EPOCH=25 "$BIVOUAC" run "$exp" --out "$tmp/c" --quiet 2>/dev/null
code=$?
set -e
[ $code -eq 137 ] || { echo "FAIL: the fault-injected run exited $code, want 137 (SIGKILL)" >&2; exit 1; }
[ ! -e "$tmp/c/result.json" ] || { echo "FAIL: the killed run wrote result.json" >&2; exit 1; }
"$BIVOUAC" run --resume "$tmp/c" --quiet

for run in b c; do
    if diff <(curve "$tmp/a") <(curve "$tmp/$run") >"$tmp/diff"; then
        echo "ok: run $run has the uninterrupted run's loss curve ($(wc -l <"$tmp/a/metrics.jsonl") lines)"
    else
        echo "FAIL: run $run's loss curve differs:" >&2; head "$tmp/diff" >&2; failed=1
    fi
    for f in params_crc32c val_loss train_loss; do
        if [ "$(field "$tmp/a" $f)" = "$(field "$tmp/$run" $f)" ]; then
            echo "ok: run $run: same $(field "$tmp/a" $f)"
        else
            echo "FAIL: run $run: $(field "$tmp/$run" $f), want $(field "$tmp/a" $f)" >&2; failed=1
        fi
    done
done

s1=$("$BIVOUAC" sample --checkpoint "$tmp/a" --prompt "ROMEO:" --tokens 60 --seed 3)
s2=$("$BIVOUAC" sample --checkpoint "$tmp/a/checkpoints" --prompt "ROMEO:" --tokens 60 --seed 3)
if [ "$s1" = "$s2" ] && [ "${s1:0:6}" = "ROMEO:" ] && [ ${#s1} -ge 60 ]; then
    echo "ok: sample is deterministic: $(echo "$s1" | head -2 | tr '\n' '|')"
else
    echo "FAIL: sample gave '$s1' then '$s2'" >&2; failed=1
fi
set +e
"$BIVOUAC" sample --checkpoint "$tmp/a" --prompt "→" --tokens 5 >/dev/null 2>"$tmp/err"
code=$?
set -e
if [ $code -eq 2 ] && grep -q "which is not in the model.s vocabulary" "$tmp/err"; then
    echo "ok: a prompt outside the vocabulary is refused: $(cat "$tmp/err")"
else
    echo "FAIL: unknown prompt character: exit $code, $(cat "$tmp/err")" >&2; failed=1
fi
exit $failed
