#!/usr/bin/env bash
# One run per --out directory (issue 18, class 4), each with its exact outcome: a new run
# refuses a directory that holds another run (any one of run.yaml, experiment.yaml,
# metrics.jsonl, result.json, checkpoints/, seed-N/) and leaves it untouched; an empty
# directory, or one with only the user's own files, is fine; --force deletes exactly what
# a run writes (so no stale checkpoint, result.json or seed-N/ of the old run is left, and
# the user's files stay) and refuses when a run's directory holds something else; --force
# and --resume do not mix; and a second process is kept out of a directory a run is using
# (a real concurrent run, whose process group is killed at the end whatever happens).
# After a normal exit no DIR/.lock is left. Environment: see bad_lib.bash
# (BIVOUAC_DATA_DIR must hold tinyshakespeare/).
set -euo pipefail
# shellcheck source=bad_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/bad_lib.bash"
B=$BIVOUAC
tiny="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"

# The background run is started with setsid: it leads its own process group, and the
# trap kills that group on any exit of this script before the temporary files go.
bg_pid=""
cleanup() {
    if [[ -n $bg_pid ]]; then
        kill -KILL -- "-$bg_pid" 2>/dev/null || true
        wait "$bg_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM # ctest's timeout: still kill the group on the way out

listing() { (cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' '); }
# tree DIR: every entry below DIR with its size and modification time.
tree() { (cd "$1" && find . -mindepth 1 -printf '%p %s %T@\n' | sort); }

dir_is() {
    local got
    got=$(listing "$2")
    if [[ $got != "$1" ]]; then
        echo "$2 holds '$got', expected '$1'" >>"$why"
        return 1
    fi
}

# A finished 40-step run: checkpoints 20, 30 and 40.
a="$tmp/a"
t "a run leaves its files and no lock behind"
s=0
outcome_exit 0 "" "$B" run "$tiny" --out "$a" --quiet || s=1
dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl result.json run.yaml " "$a" || s=1
report $s "$B" run "$tiny" --out "$a" --quiet

t "a second run into the directory of a finished one is refused; nothing changes"
before=$(tree "$a")
s=0
outcome_fail 2 "bivouac: error: $a holds another run; use --resume $a to continue it or --force to replace it" \
    "$B" run "$tiny" --out "$a" --quiet || s=1
[[ $(tree "$a") == "$before" ]] || { echo "$a changed" >>"$why"; s=1; }
report $s "$B" run "$tiny" --out "$a" --quiet

for marker in run.yaml experiment.yaml metrics.jsonl result.json checkpoints/ seed-3/; do
    t "a directory holding only $marker holds a run"
    d="$tmp/marker-${marker%/}"
    mkdir -p "$d"
    if [[ $marker == */ ]]; then mkdir "$d/$marker"; else echo x >"$d/$marker"; fi
    s=0
    outcome_fail 2 "bivouac: error: $d holds another run; use --resume $d to continue it or --force to replace it" \
        "$B" run "$tiny" --out "$d" --quiet || s=1
    dir_is "${marker%/} " "$d" || s=1
    report $s "$B" run "$tiny" --out "$d" --quiet
done

t "an empty directory, or one with only the user's files, takes a run"
s=0
mkdir -p "$tmp/empty" "$tmp/mine"
echo notes >"$tmp/mine/notes.txt"
outcome_exit 0 "" "$B" run "$tiny" --out "$tmp/empty" --quiet || s=1
outcome_exit 0 "" "$B" run "$tiny" --out "$tmp/mine" --quiet || s=1
dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl notes.txt result.json run.yaml " "$tmp/mine" || s=1
[[ $(cat "$tmp/mine/notes.txt") == notes ]] || { echo "notes.txt changed" >>"$why"; s=1; }
report $s "$B" run "$tiny" --out "$tmp/mine" --quiet

t "--force replaces the old run: its higher checkpoints and result.json go, user files stay"
echo notes >"$a/notes.txt"
s=0
outcome_exit 0 "" "$B" run "$tiny" -s train.steps=20 --out "$a" --force --quiet || s=1
dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl notes.txt result.json run.yaml " "$a" || s=1
# without the clearing, the stale 30 and 40 would be kept and the new 10 and 20 pruned
dir_is "ckpt-00000010.bvck ckpt-00000020.bvck " "$a/checkpoints" || s=1
grep -q '"steps": 20,' "$a/result.json" || { echo "result.json is not the new run's" >>"$why"; s=1; }
[[ $(grep -c '"grad_norm"' "$a/metrics.jsonl") == 20 ]] || { echo "metrics.jsonl is not the new run's" >>"$why"; s=1; }
report $s "$B" run "$tiny" -s train.steps=20 --out "$a" --force --quiet

t "--force also removes a --repeat run's seed-N/ directories"
r="$tmp/repeat"
"$B" run "$tiny" -s train.steps=10 --repeat 2 --out "$r" --quiet >/dev/null
s=0
[[ -d $r/seed-7 && -d $r/seed-8 ]] || { echo "the --repeat run made no seed-7/ seed-8/" >>"$why"; s=1; }
outcome_exit 0 "" "$B" run "$tiny" -s train.steps=10 --out "$r" --force --quiet || s=1
dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl result.json run.yaml " "$r" || s=1
report $s "$B" run "$tiny" -s train.steps=10 --out "$r" --force --quiet

t "--force refuses a run's directory holding something a run does not write"
echo mine >"$a/checkpoints/mine.txt"
before=$(tree "$a")
s=0
outcome_fail 2 "bivouac: error: --force removes only what a run writes, and $a/checkpoints/mine.txt is not a run's; move it away first" \
    "$B" run "$tiny" --out "$a" --force --quiet || s=1
[[ $(tree "$a") == "$before" ]] || { echo "$a changed" >>"$why"; s=1; }
report $s "$B" run "$tiny" --out "$a" --force --quiet
rm "$a/checkpoints/mine.txt"

t "--force with --resume is refused"
expect_fail 2 "bivouac: error: --force replaces the run in --out DIR; --resume DIR continues it: use one or the other" \
    "$B" run --resume "$a" --force --quiet

# ---- a second process while a run uses the directory ----
long="$tmp/long"
setsid "$B" run "$tiny" -s train.steps=1000000 --out "$long" --quiet >"$tmp/long.out" 2>"$tmp/long.err" &
bg_pid=$!
# the run holds the lock from before it writes run.yaml until it exits; wait for its
# first metrics line, by then all of its run files are there
for _ in $(seq 600); do
    [[ -s $long/metrics.jsonl ]] && break
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
done
t "the background run holds DIR/.lock with its pid"
s=0
: >"$why"
[[ -s $long/metrics.jsonl ]] || { echo "the background run wrote no metrics: $(cat "$tmp/long.err")" >>"$why"; s=1; }
[[ $(cat "$long/.lock" 2>/dev/null) == "$bg_pid" ]] ||
    { echo "$long/.lock holds '$(cat "$long/.lock" 2>/dev/null)', expected '$bg_pid'" >>"$why"; s=1; }
report $s setsid "$B" run "$tiny" -s train.steps=1000000 --out "$long" --quiet

in_use="bivouac: error: $long is in use by another bivouac run (pid $bg_pid)"
t "a second run into a directory in use is refused"
expect_fail 2 "$in_use" "$B" run "$tiny" --out "$long" --quiet
t "--force does not take a directory in use"
expect_fail 2 "$in_use" "$B" run "$tiny" --out "$long" --force --quiet
t "--resume of a directory in use is refused"
expect_fail 2 "$in_use" "$B" run --resume "$long" --quiet

t "the killed background run leaves no process; its directory can be replaced"
kill -KILL -- "-$bg_pid"
wait "$bg_pid" 2>/dev/null || true
s=0
: >"$why"
if kill -0 -- "-$bg_pid" 2>/dev/null; then
    echo "process group $bg_pid still has processes" >>"$why"
    s=1
fi
bg_pid=""
# a killed run cannot delete its .lock; the file alone locks nothing
[[ -e $long/.lock ]] || { echo "$long/.lock is gone after SIGKILL" >>"$why"; s=1; }
outcome_exit 0 "" "$B" run "$tiny" --out "$long" --force --quiet || s=1
dir_is "checkpoints curves.png curves.svg experiment.yaml metrics.jsonl result.json run.yaml " "$long" || s=1
report $s "$B" run "$tiny" --out "$long" --force --quiet

finish
