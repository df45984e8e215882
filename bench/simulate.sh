#!/usr/bin/env bash
# The simulated market (issue 16; docs/simulation.md). Five tables:
#   1. Bamboo's Table 3a: configs/sim/bamboo-bert-large.yaml at the paper's five
#      preemption probabilities, --runs simulations each, beside the paper's rows (and
#      each figure's difference), and the on-demand baseline (the paper's value 1.1).
#   2. The same workload driven by each AWS trace of ../shared/traces/ for as long as the
#      trace lasts: its value with redundancy (eflb + checkpoints), with checkpoints alone
#      (every loss of a stage a restart) and on demand, at a restart of --restart seconds
#      (and of --slow-restart: one that re-partitions and reloads the model, minutes).
#   3. scripts/lua/value.lua against Bamboo's policy (fixed P = 1.5 x P_demand, eager FRC)
#      on Table 3a's market, --runs simulations per rate: value, throughput, cost; and
#      value.lua with lazy FRC's pause ten times as long (how much the gain rests on it).
#   4. A Dorylus graph run (configs/sim/dorylus-gcn-1m.yaml): value.lua's function count
#      against Dorylus's fixed min(#intervals, 100), on demand and on spot servers.
#   5. Instance types: value.lua (lazy FRC allowed, as in 3) choosing between p3.2xlarge
#      and g4dn.xlarge (one T4: a pipeline's step --t4-step seconds at 8 stages, and 4x the
#      V100's as a check) on Table 3a's market, against Bamboo's fixed p3.2xlarge; both
#      types preempted at P, and g4dn.xlarge at min(5 P, 0.95) (a market where the cheap
#      type is worse than it looks: value.lua has to find that out while it runs).
#   bench/simulate.sh [--build-dir build] [--runs 1000] [--restart 30] [--slow-restart 300]
#                     [--zones 1] [--t4-step 6.84]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=build runs=1000 restart=30 slow=300 zones=1 t4=6.84
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --runs) runs=$2 ;;
    --restart) restart=$2 ;;
    --slow-restart) slow=$2 ;;
    --zones) zones=$2 ;;
    --t4-step) t4=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "simulate.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "simulate.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
exp="$here/configs/sim/bamboo-bert-large.yaml"
traces="$here/../shared/traces"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores; $runs simulated runs per row"

# the figures of DIR/summary.json, in the table's order
row() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))
print(" ".join(str(r[k]) for k in ("preemptions", "interval_hours", "lifetime_hours",
      "fatal_failures", "nodes", "throughput", "cost_per_hour", "value", "useful_fraction",
      "hours", "failovers")))
EOF
}
ondemand=(-s pipeline.stages=8 -s cost.spot=false -s cloud.preemption=0 -s 'resilience=[]'
          -s simulate.rc_overhead=0)

t0=$(date +%s.%N)
for p in 0.01 0.05 0.10 0.25 0.50; do
    "$bivouac" simulate "$exp" --runs "$runs" --out "$tmp/p$p" --no-plot --quiet \
        -s cloud.preemption=$p >/dev/null 2>&1
    echo "$p $(row "$tmp/p$p")" >>"$tmp/table3a"
done
"$bivouac" simulate "$exp" --runs "$runs" --out "$tmp/demand" --no-plot --quiet "${ondemand[@]}" \
    >/dev/null 2>&1
t1=$(date +%s.%N)
python3 - "$tmp/table3a" "$(row "$tmp/demand")" "$(python3 -c "print($t1 - $t0)")" <<'EOF'
import sys
paper = {"0.01": (8.50, 2.08, 15.20, 0.06, 45.18, 87.99, 41.11, 2.10),
         "0.05": (48.15, 0.44, 10.14, 0.23, 43.65, 76.35, 39.73, 1.90),
         "0.10": (99.77, 0.23, 6.71, 0.29, 41.69, 72.12, 37.94, 1.88),
         "0.25": (276.52, 0.10, 3.13, 1.04, 35.80, 60.12, 32.58, 1.82),
         "0.50": (709.83, 0.06, 1.49, 5.98, 26.96, 40.37, 24.53, 1.59)}
cols = ("preemptions", "interval (h)", "lifetime (h)", "fatal", "nodes", "throughput",
        "cost ($/h)", "value")
print("\nBamboo's Table 3a: paper / bivouac (difference)")
print("| P | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
outside = []
for line in open(sys.argv[1]):
    p, *v = line.split()
    v = [float(x) for x in v]
    cells = []
    for c, a, b in zip(cols, paper[p], v):
        d = (b - a) / a
        if abs(d) > 0.15:
            outside.append(f"{c} at {p}")
        cells.append(f"{a:g} / {b:.3g} ({100 * d:+.0f} %)")
    print(f"| {p} | " + " | ".join(cells) + " |")
d = [float(x) for x in sys.argv[2].split()]
print(f"\non demand (4 x 8, $3.06/h): throughput {d[5]:.1f} samples/s, {d[6]:.2f} $/h, "
      f"value {d[7]:.3f} (paper: 1.1)")
print("outside +-15 %:", ", ".join(outside) if outside else "none")
print(f"the six batches took {float(sys.argv[3]):.1f} s")
EOF

# 2. the traces, for as long as each lasts (one run each: a trace is one market)
echo
echo "The traces: value (samples/s per \$/h) over each trace's length"
echo "| trace | hours | on demand | redundancy | fatal | checkpoints, restart ${restart} s | restarts | redundancy, restart ${slow} s | checkpoints, restart ${slow} s |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in "$traces"/aws-*.csv; do
    hours=$(python3 - "$f" <<'EOF'
import sys
last = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()][-1]
print(int(last[0]) / (3.6e6 if len(last) == 3 else 3600))
EOF
)
    base=(-s "simulate.hours=$hours" -s simulate.samples=1e15 --runs 1 --no-plot --quiet)
    cloud="cloud={plugin: sim, trace: $f, zones: $zones}"
    v=()
    for case in "red $restart" "ckpt $restart" "red $slow" "ckpt $slow"; do
        set -- $case
        res='[{plugin: redundancy}, {plugin: checkpoint, every: 10}]'
        [ "$1" = ckpt ] && res='[{plugin: checkpoint, every: 10}]'
        "$bivouac" simulate "$exp" "${base[@]}" --out "$tmp/t" -s "$cloud" -s "resilience=$res" \
            -s "simulate.restart_seconds=$2" >/dev/null 2>&1
        v+=("$(row "$tmp/t")")
    done
    "$bivouac" simulate "$exp" "${base[@]}" --out "$tmp/t" "${ondemand[@]}" >/dev/null 2>&1
    python3 - "$(basename "$f")" "$hours" "$(row "$tmp/t")" "${v[@]}" <<'EOF'
import sys
name, hours, demand, *cases = sys.argv[1:]
f = lambda s, k: float(s.split()[k])
print(f"| {name} | {float(hours):.1f} | {f(demand, 7):.3f} | {f(cases[0], 7):.3f} | "
      f"{f(cases[0], 3):.0f} | {f(cases[1], 7):.3f} | {f(cases[1], 3):.0f} | "
      f"{f(cases[2], 7):.3f} | {f(cases[3], 7):.3f} |")
EOF
done

# 3. a policy that raises value
echo
echo "scripts/lua/value.lua against Bamboo's policy: mean over $runs runs (value in samples/s per \$/h)"
echo "| P | Bamboo: value | throughput | \$/h | fatal | value.lua: value | throughput | \$/h | fatal | gain | gain, lazy pause x10 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
value=(-s "policy.file=$here/scripts/lua/value.lua" -s 'policy.params={lazy_min_stages: 8}')
for p in 0.01 0.05 0.10 0.25 0.50; do
    "$bivouac" simulate "$exp" --runs "$runs" --out "$tmp/v$p" --no-plot --quiet \
        -s cloud.preemption=$p "${value[@]}" >/dev/null 2>&1
    "$bivouac" simulate "$exp" --runs "$runs" --out "$tmp/w$p" --no-plot --quiet \
        -s cloud.preemption=$p "${value[@]}" -s simulate.lflb_failover_seconds=17 >/dev/null 2>&1
    python3 - "$p" "$(row "$tmp/p$p")" "$(row "$tmp/v$p")" "$(row "$tmp/w$p")" <<'EOF'
import sys
p, *rows = sys.argv[1:]
b, v, w = ([float(x) for x in r.split()] for r in rows)
cells = lambda r: f"{r[7]:.3f} | {r[5]:.1f} | {r[6]:.2f} | {r[3]:.2f}"
print(f"| {p} | {cells(b)} | {cells(v)} | {100 * (v[7] / b[7] - 1):+.1f} % | "
      f"{100 * (w[7] / b[7] - 1):+.1f} % |")
EOF
done

# 4. graph runs: value.lua's function count against Dorylus's fixed min(#intervals, 100)
echo
graph="$here/configs/sim/dorylus-gcn-1m.yaml"
echo "Graph runs (configs/sim/dorylus-gcn-1m.yaml): Dorylus's fixed 16 functions against value.lua, mean over $runs runs"
echo "| servers | Dorylus: s/epoch | \$ | value 1/(T C) | value.lua: functions | s/epoch | \$ | value | gain |"
echo "|---|---|---|---|---|---|---|---|---|"
for market in "on demand|" "spot, 0.1 an hour|-s cost.spot=true -s cloud.preemption=0.1" \
              "spot, 0.5 an hour|-s cost.spot=true -s cloud.preemption=0.5"; do
    label=${market%%|*}
    read -r -a extra <<<"${market#*|}"
    "$bivouac" simulate "$graph" --runs "$runs" --out "$tmp/gd" --no-plot --quiet \
        "${extra[@]}" >/dev/null 2>&1
    "$bivouac" simulate "$graph" --runs "$runs" --out "$tmp/gvl" --no-plot --quiet \
        "${extra[@]}" -s "policy.file=$here/scripts/lua/value.lua" >/dev/null 2>&1
    python3 - "$label" "$tmp/gd" "$tmp/gvl" <<'EOF'
import json, statistics, sys
label, d, v = sys.argv[1:]
def fig(dir):
    r = json.load(open(dir + "/result.json"))["runs"]
    return (statistics.mean(p["wall_seconds"] / p["steps"] for p in r),
            statistics.mean(p["cost_usd"] for p in r), statistics.mean(p["value"] for p in r))
lam = [json.loads(l)["value"] for l in open(v + "/metrics.jsonl") if '"series": "lambdas"' in l]
a, b = fig(d), fig(v)
print(f"| {label} | {a[0]:.3f} | {a[1]:.4f} | {a[2]:.4f} | {lam[0] if lam else '-'} | "
      f"{b[0]:.3f} | {b[1]:.4f} | {b[2]:.4f} | {100 * (b[2] / a[2] - 1):+.1f} % |")
EOF
done

# 5. instance types: value.lua between p3.2xlarge and g4dn.xlarge
echo
echo "Instance types: value.lua (lazy FRC allowed) between p3.2xlarge and g4dn.xlarge (a step of $t4 s at 8 stages; 4x the V100's: 9.776 s) against Bamboo's fixed p3.2xlarge, mean over $runs runs"
echo "| P | g4dn.xlarge preempted at | Bamboo: value | value.lua: value | throughput | \$/h | time (h) | runs that moved | gain | gain, T4 at 4x |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for p in 0.01 0.05 0.10 0.25 0.50; do
    for hostile in 0 1; do
        g=$p
        [ "$hostile" = 1 ] && g=$(python3 -c "print(min(5 * $p, 0.95))")
        for step in "$t4" 9.776; do
            "$bivouac" simulate "$exp" --runs "$runs" --out "$tmp/t$step" --no-plot --quiet \
                -s cloud.preemption=$p -s "cloud.preemption_by_type=g4dn.xlarge=$g" \
                -s "simulate.instances={g4dn.xlarge: $step}" "${value[@]}" >/dev/null 2>&1
        done
        python3 - "$p" "$g" "$(row "$tmp/p$p")" "$tmp/t$t4" "$tmp/t9.776" <<'EOF'
import json, sys
p, g, b, t, t4x = sys.argv[1:]
b = [float(x) for x in b.split()]
r, r4 = (json.load(open(d + "/summary.json")) for d in (t, t4x))
moved = sum(x["instance_switches"] > 0 for x in r["per_run"]) / len(r["per_run"])
print(f"| {p} | {float(g):.2f} | {b[7]:.3f} | {r['value']:.3f} | {r['throughput']:.1f} | "
      f"{r['cost_per_hour']:.2f} | {r['hours']:.1f} | {100 * moved:.0f} % | "
      f"{100 * (r['value'] / b[7] - 1):+.1f} % | {100 * (r4['value'] / b[7] - 1):+.1f} % |")
EOF
    done
done
