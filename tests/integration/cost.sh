#!/usr/bin/env bash
# Every run has a price (docs/cost.md), and says what it took (load_seconds, peak_rss_mb):
# result.json's cost_usd is the run's own process billed as one instance of cost.instance
# for the wall time result.json reports, at the price table's rate (to the printed
# precision; the shipped table); value = 1/(T C);
# metrics.jsonl carries the running cost, never decreasing; spot prices apply where the
# table has them; a run with role processes also pays for each of them (and reports how
# many instances it runs on); budget.usd stops a run cleanly with its results saved; a
# resumed run adds its earlier sessions' cost; a bad table or an unknown instance type is
# refused with file:line:column and exit 2.
# Environment (set by ctest): BIVOUAC.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-cost.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/exp.yaml" <<'YAML'
model: {plugin: gcn}
dataset: {synthetic: communities, nodes: 300, features: 24, classes: 3, val: 60, test: 120}
train: {epochs: 8}
compute: {plugin: cpu, threads: 1}
YAML
json() { python3 -c 'import json, sys; print(eval(sys.argv[2], {"r": json.load(open(sys.argv[1]))}))' "$@"; }

# 1. the one-process run: c5n.2xlarge on demand (the default), $0.432 an hour
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/a" --quiet
check "cost = wall seconds x \$0.432/h" \
    "$(json "$tmp/a/result.json" 'abs(r["cost_usd"] - r["wall_seconds"] * 0.432 / 3600) <= 1e-9 * r["cost_usd"]')" True
check "value = 1 / (wall seconds x cost)" \
    "$(json "$tmp/a/result.json" 'abs(r["value"] * r["wall_seconds"] * r["cost_usd"] - 1) < 1e-9')" True
check "load time and peak memory: there, and plausible" \
    "$(json "$tmp/a/result.json" '(0 <= r["load_seconds"] < r["wall_seconds"] + 60, 1 < r["peak_rss_mb"] < 4096)')" \
    "(True, True)"
check "the breakdown names the instance and the table" \
    "$(json "$tmp/a/result.json" '(list(r["cost_breakdown"]), r["cost_breakdown"]["c5n.2xlarge"]["instances"], r["cost_prices"])')" \
    "(['c5n.2xlarge'], 1, 'aws-us-east-1-2021')"
check "metrics.jsonl: a running cost per epoch, never decreasing, up to the total" \
    "$(python3 - "$tmp/a" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
c = [l["cost_usd"] for l in lines if "epoch" in l and "train_loss" in l]
total = json.load(open(sys.argv[1] + "/result.json"))["cost_usd"]
print(len(c), all(0 < a <= b for a, b in zip(c, c[1:])), c[-1] <= total)
EOF
)" "8 True True"

# 2. spot where the table has a spot price (p3.2xlarge: $0.918/h), on demand where not
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/b" --quiet -s cost.instance=p3.2xlarge \
    -s cost.spot=true
check "p3.2xlarge spot: \$0.918/h" \
    "$(json "$tmp/b/result.json" '(list(r["cost_breakdown"]), abs(r["cost_usd"] - r["wall_seconds"] * 0.918 / 3600) <= 1e-9 * r["cost_usd"])')" \
    "(['p3.2xlarge spot'], True)"
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/c" --quiet -s cost.instance=c5.large -s cost.spot=true
check "c5.large has no spot price: billed on demand, \$0.085/h" \
    "$(json "$tmp/c/result.json" '(list(r["cost_breakdown"]), abs(r["cost_usd"] - r["wall_seconds"] * 0.085 / 3600) <= 1e-9 * r["cost_usd"])')" \
    "(['c5.large'], True)"

# 3. a table of the user's own, relative to the experiment file
cat >"$tmp/mine.yaml" <<'YAML'
name: mine
instances:
  box: {on_demand: 36}
YAML
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/d" --quiet -s cost.prices=mine.yaml -s cost.instance=box
check "a table of one's own: \$36/h is a cent a second" \
    "$(json "$tmp/d/result.json" '(r["cost_prices"], abs(r["cost_usd"] - r["wall_seconds"] * 0.01) <= 1e-9 * r["cost_usd"])')" \
    "('mine', True)"

# 4. role processes on the local cloud: the coordinator and each of its 3 roles
cat >"$tmp/cluster.yaml" <<'YAML'
model: {plugin: gcn}
dataset: {synthetic: communities, nodes: 300, features: 24, classes: 3, val: 60, test: 120}
train: {epochs: 4}
compute: {plugin: cpu, threads: 1}
cloud: {plugin: local}
cluster: {graph_servers: 1, param_servers: 1, tensor_workers: 1}
YAML
"$BIVOUAC" run "$tmp/cluster.yaml" --out "$tmp/e" --quiet
check "a cluster run pays for the coordinator and its 3 role processes" \
    "$(json "$tmp/e/result.json" '(r["cost_breakdown"]["c5n.2xlarge"]["instances"], r["cost_usd"] > r["wall_seconds"] * 0.432 / 3600)')" \
    "(4, True)"
check "a cluster run reports its size each epoch (the instances series)" \
    "$(grep -c '"series": "instances", "unit": "", "value": 4,' "$tmp/e/metrics.jsonl")" 4

# 5. the budget: a fraction of a cent stops the run after its first epoch, results saved
rc=0
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/f" --quiet -s budget.usd=1e-9 2>"$tmp/f.err" || rc=$?
check "budget: the run ends well" "$rc" 0
check "budget: stopped after one epoch, saying why" \
    "$(json "$tmp/f/result.json" '(r["epochs"], r["stop_reason"].split(" (")[0])')" \
    "(1, 'reached the budget of \$1e-09')"

# 6. a resumed run pays for its earlier sessions too, from its checkpoint
(BIVOUAC_FAULT_KILL_AFTER_EPOCH=5 "$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/k" --quiet \
    -s "resilience=[{plugin: checkpoint, every: 1}]" >/dev/null 2>&1) 2>/dev/null || true
"$BIVOUAC" run --resume "$tmp/k" --quiet 2>/dev/null
check "resumed: the earlier session's cost is carried, and each epoch keeps its cost" \
    "$(python3 - "$tmp/k" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/result.json"))
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
c = [l.get("cost_usd") for l in lines if "train_loss" in l]
before = r["cost_breakdown"]["earlier sessions"]["usd"]
print(r["epochs"], len(c), before > 0, all(0 < a <= b for a, b in zip(c, c[1:])),
      r["cost_usd"] > before)
EOF
)" "8 8 True True True"

# 7. what is refused, where
cat >"$tmp/bad.yaml" <<'YAML'
model: {plugin: gcn}
dataset: {synthetic: communities, nodes: 300, features: 24, classes: 3, val: 60, test: 120}
cost: {prices: aws-us-east-1-2021, instance: c5n.3xlarge}
YAML
rc=0
"$BIVOUAC" run "$tmp/bad.yaml" --out "$tmp/g" >"$tmp/g.out" 2>"$tmp/g.err" || rc=$?
check "an unknown instance type: exit 2" "$rc" 2
check "an unknown instance type: where and what" \
    "$(grep -o "^$tmp/bad.yaml:3:46: error: instance type 'c5n.3xlarge' is not in price table aws-us-east-1-2021 (c5.large, " "$tmp/g.err")" \
    "$tmp/bad.yaml:3:46: error: instance type 'c5n.3xlarge' is not in price table aws-us-east-1-2021 (c5.large, "
printf 'name: broken\ninstances:\n  box: {on_demand: cheap}\n' >"$tmp/broken.yaml"
rc=0
"$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/h" -s cost.prices=broken.yaml -s cost.instance=box \
    >"$tmp/h.out" 2>"$tmp/h.err" || rc=$?
check "a bad price: exit 2" "$rc" 2
check "a bad price: the table's file, line and column" \
    "$(grep -o "price table 'broken.yaml': $tmp/broken.yaml:3:20: box's on_demand must be a price in USD (a number >= 0)" "$tmp/h.err")" \
    "price table 'broken.yaml': $tmp/broken.yaml:3:20: box's on_demand must be a price in USD (a number >= 0)"
finish
