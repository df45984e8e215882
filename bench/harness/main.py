"""bench/run: builds bivouac (Release) and its microbenchmarks, measures the machine's
limits, then runs each benchmark alternately with bivouac and its reference on the same
data and thread count, and writes a table (stdout) and results.json. docs/benchmarks.md
explains the method and the targets."""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys

import procs
import roofline
import stats
import suite

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)

# Release, with debug information kept: it changes no generated code, and perf needs the
# symbols to say where the time goes.
RELEASE_C_FLAGS = "-g"


def log(msg, quiet=False):
    if not quiet:
        sys.stderr.write("bench: %s\n" % msg)
        sys.stderr.flush()


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and few runs: under a minute with --no-reference")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only benchmarks whose name contains NAME (repeatable, or "
                         "comma-separated); 'limits' selects the machine limits alone")
    ap.add_argument("--no-reference", action="store_true",
                    help="bivouac and the machine limits only (no PyTorch needed)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for bivouac (compute.threads) and torch (default 2)")
    ap.add_argument("--reps", type=int, help="runs of each side (default per benchmark)")
    ap.add_argument("--source", default=REPO, help="bivouac source tree (default: this one)")
    ap.add_argument("--build-dir",
                    help="use this already-built tree instead of building Release into "
                         "SOURCE/build-bench")
    ap.add_argument("--out", default=os.path.join(BENCH, "out"),
                    help="where results.json, run directories and exported data go")
    ap.add_argument("--data-dir", default=os.environ.get("BIVOUAC_DATA_DIR") or
                    os.path.join(os.path.dirname(REPO), "shared", "data"))
    ap.add_argument("--venv", default=os.path.join(BENCH, ".venv"),
                    help="the reference's virtual environment (bench/setup-reference.sh)")
    ap.add_argument("--mem-limit-mb", type=float, default=None,
                    help="stop a run whose resident memory passes this (default: 75%% of "
                         "the machine's memory)")
    ap.add_argument("--openblas-core", default="auto", metavar="auto|env|NAME",
                    help="OpenBLAS kernels for bivouac and the limit tools: 'auto' (default) "
                         "removes OPENBLAS_CORETYPE so OpenBLAS picks them for this CPU, as "
                         "the references' own BLAS does; 'env' keeps the environment's "
                         "setting; a NAME (Haswell, SkylakeX, ...) sets it")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="use each reference's default path instead of timing all of them")
    a = ap.parse_args(argv)
    a.only = [s for o in a.only for s in o.split(",") if s]
    return a


def mem_total_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024.0
    return 8192.0


# ---- building ----------------------------------------------------------------------------

def build_bivouac(a):
    if a.build_dir:
        build = os.path.abspath(a.build_dir)
        if not os.path.exists(os.path.join(build, "bivouac")):
            sys.exit("bench: %s has no bivouac executable; build it first or drop "
                     "--build-dir" % build)
        return build, "as given"
    build = os.path.join(os.path.abspath(a.source), "build-bench")
    log("building bivouac (Release) in %s" % build)
    cfg = ["cmake", "-S", a.source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
           "-DBIVOUAC_TESTS=OFF", "-DCMAKE_C_FLAGS=" + RELEASE_C_FLAGS]
    for cmd in (cfg, ["cmake", "--build", build, "-j", str(os.cpu_count() or 2)]):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-6000:])
            sys.exit("bench: '%s' failed" % " ".join(cmd))
    return build, "Release"


def build_tools(a, build):
    tools = os.path.join(build, "bench-tools")
    cmd = ["make", "-s", "-C", BENCH, "BIVOUAC_SRC=" + os.path.abspath(a.source),
           "BIVOUAC_BUILD=" + build, "TOOLS=" + tools]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-6000:])
        sys.exit("bench: building the microbenchmarks failed")
    return tools


def bivouac_env(a, build):
    env = dict(os.environ)
    if a.openblas_core == "auto":
        env.pop("OPENBLAS_CORETYPE", None)
    elif a.openblas_core != "env":
        env["OPENBLAS_CORETYPE"] = a.openblas_core
    env["BIVOUAC_DATA_DIR"] = os.path.abspath(a.data_dir)
    env["BIVOUAC_PLUGIN_PATH"] = os.path.join(build, "plugins")
    env["BIVOUAC_CACHE_DIR"] = os.path.join(os.path.abspath(a.out), "cache")
    return env


def model_plugins(build, env):
    """Names of the model plugins this build loads, from `bivouac plugins --json`."""
    r = subprocess.run([os.path.join(build, "bivouac"), "plugins", "--json"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return set()
    return {p["name"] for p in doc.get("plugins", [])
            if p.get("kind") == "model" and p.get("loaded")}


# ---- machine limits ------------------------------------------------------------------------

def run_tool(argv, env, mem_limit):
    r = procs.run(argv, env=env, timeout=300, mem_limit_mb=mem_limit)
    doc = stats.last_json_line(r.stdout) if r.ok else None
    if doc is None:
        return {"error": r.why()}
    doc["peak_rss_mb"] = round(r.peak_rss_mb, 1)
    return doc


def measure_limits(a, tools, build, env, mem_limit):
    p = suite.limits_params(a.quick)
    t = str(a.threads)
    out = {}
    out["triad"] = run_tool([os.path.join(tools, "triad"), "--threads", t,
                             "--mb", str(p["triad"]["mb"]), "--reps", str(p["triad"]["reps"])],
                            env, mem_limit)
    sgemm = [os.path.join(tools, "sgemm"), "--threads", t, "--n", str(p["sgemm"]["n"]),
             "--reps", str(p["sgemm"]["reps"])]
    out["sgemm"] = run_tool(sgemm, env, mem_limit)
    if cpu_has("avx512f") and "avx512" not in out["sgemm"].get("openblas_core", "").lower() \
            and out["sgemm"].get("openblas_core") not in ("SkylakeX", "Cooperlake"):
        # OpenBLAS is running AVX2 kernels on an AVX-512 machine (OPENBLAS_CORETYPE pins
        # them, or its core detection falls back): the machine's limit is what its AVX-512
        # kernels reach. Both are kept; bivouac runs with the ones in env.
        out["sgemm_avx512"] = run_tool(sgemm, dict(env, OPENBLAS_CORETYPE="SkylakeX"),
                                       mem_limit)
    s = p["spmm"]
    out["spmm"] = run_tool([os.path.join(tools, "spmm"), "--plugin-dir",
                            os.path.join(build, "plugins"), "--threads", t,
                            "--nodes", str(s["nodes"]), "--edges", str(s["edges"]),
                            "--features", str(s["features"]), "--reps", str(s["reps"])],
                           env, mem_limit)
    return out


def cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return flag in line.split()
    except OSError:
        pass
    return False


def best_limits(rounds):
    """STREAM's convention: the best rate seen. Each limit is measured at the start and at
    the end of the run; on a shared machine the better of the two is the closer to the
    hardware's."""
    def best(key, field):
        vals = [r[key][field] for r in rounds if field in r.get(key, {})]
        return max(vals) if vals else None
    sgemm = [v for v in (best("sgemm", "sgemm_gflops"), best("sgemm_avx512", "sgemm_gflops"))
             if v is not None]
    return {"triad_gbps": best("triad", "triad_gbps"),
            "sgemm_gflops": max(sgemm) if sgemm else None,
            "sgemm_default_core_gflops": best("sgemm", "sgemm_gflops"),
            "spmm_gbps": best("spmm", "spmm_gbps")}


# ---- one benchmark -------------------------------------------------------------------------

def write_config(a, b):
    d = os.path.join(os.path.abspath(a.out), "configs")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, b.name + ".yaml")
    with open(path, "w") as f:
        f.write("# Written by bench/run (bench/harness/suite.py); JSON is YAML.\n")
        json.dump(b.experiment(a.threads), f, indent=2)
        f.write("\n")
    return path


def export_graph(a, b, tools, env, mem_limit, cache):
    key = json.dumps(b.dataset, sort_keys=True)
    if key in cache:
        return cache[key]
    d = os.path.join(os.path.abspath(a.out), "data")
    os.makedirs(d, exist_ok=True)
    prefix = os.path.join(d, "graph%d" % len(cache))
    argv = [os.path.join(tools, "graph_export"), "--out", prefix] + \
        suite.export_args(b.dataset, os.path.abspath(a.data_dir))
    r = procs.run(argv, env=env, timeout=600, mem_limit_mb=mem_limit)
    cache[key] = prefix if r.ok else None
    if not r.ok:
        log("exporting %s's dataset failed: %s" % (b.name, r.why()))
    return cache[key]


def run_bivouac(a, b, build, env, config, rep, mem_limit):
    run_dir = os.path.join(os.path.abspath(a.out), "runs", b.name, "bivouac-%d" % rep)
    shutil.rmtree(run_dir, ignore_errors=True)
    argv = [os.path.join(build, "bivouac"), "run", config, "--out", run_dir, "--quiet"]
    r = procs.run(argv, env=env, timeout=1200, mem_limit_mb=mem_limit)
    rec = {"impl": "bivouac", "rep": rep, "peak_rss_mb": round(r.peak_rss_mb, 1),
           "wall_s": round(r.wall, 3), "dir": run_dir}
    if not r.ok:
        rec["error"] = r.why()
        return rec
    times = stats.bivouac_times(run_dir, b.plugin, suite.BIVOUAC_SKIP[b.plugin])
    if not times:
        rec["error"] = "no timed epochs in %s/metrics.jsonl" % run_dir
        return rec
    rec["seconds"] = stats.median(times)
    rec["n_timed"] = len(times)
    try:
        with open(os.path.join(run_dir, "result.json")) as f:
            res = json.load(f)
        for k in ("test_accuracy", "val_loss", "train_loss", "flops_per_token",
                  "tokens_per_second"):
            if k in res:
                rec[k] = res[k]
    except (OSError, ValueError):
        pass
    return rec


def run_reference(a, b, variant, graph, config, epochs, warmup, rep, env, mem_limit):
    py = os.path.join(os.path.abspath(a.venv), "bin", "python")
    argv = [py, os.path.join(BENCH, "ref", b.ref_script), "--threads", str(a.threads),
            "--epochs", str(epochs), "--warmup", str(warmup), "--experiment", config]
    base, _, extra = variant.partition("+")
    if b.plugin in ("gcn", "gat"):
        argv += ["--graph", graph, "--aggr", base]
    else:
        argv += ["--data", os.path.join(os.path.abspath(a.data_dir), "tinyshakespeare",
                                        "input.txt")]
    if extra == "compile" or base == "compile":
        argv.append("--compile")
    r = procs.run(argv, env=env, timeout=1200, mem_limit_mb=mem_limit)
    rec = {"impl": "reference", "variant": variant, "rep": rep,
           "peak_rss_mb": round(r.peak_rss_mb, 1), "wall_s": round(r.wall, 3)}
    doc = stats.last_json_line(r.stdout) if r.ok else None
    if doc is None:
        rec["error"] = r.why() if not r.ok else "no JSON result line"
        return rec
    times = doc.get("epoch_seconds") or doc.get("step_seconds") or []
    if not times:
        rec["error"] = "no timed epochs"
        return rec
    rec["seconds"] = stats.median(times)
    rec["n_timed"] = len(times)
    for k in ("test_accuracy", "train_loss", "torch", "aggr", "compiled"):
        if k in doc:
            rec[k] = doc[k]
    return rec


def reference_env(a):
    env = dict(os.environ)
    t = str(a.threads)
    env.update({"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
                "TORCHINDUCTOR_CACHE_DIR": os.path.join(os.path.abspath(a.out),
                                                        "inductor-cache"),
                "PYTHONWARNINGS": "ignore"})
    return env


def run_benchmark(a, b, ctx):
    entry = {"name": b.name, "model": b.plugin, "dataset": b.dataset,
             "unit": "s/step" if b.plugin == "transformer" else "s/epoch",
             "target_speedup": b.target, "runs": []}
    if b.plugin not in ctx["plugins"]:
        entry["skipped"] = "not available yet (model plugin '%s' not found)" % b.plugin
        log("%s: %s" % (b.name, entry["skipped"]))
        return entry
    reps = a.reps or b.reps
    config = write_config(a, b)
    entry["config"] = config
    ref_ok = ctx["reference"] is True
    if not ref_ok:
        entry["reference_skipped"] = ctx["reference"]
    graph = None
    if ref_ok and b.is_graph:
        graph = export_graph(a, b, ctx["tools"], ctx["env"], ctx["mem_limit"], ctx["graphs"])
        if graph is None:
            ref_ok = False
            entry["reference_skipped"] = "dataset export failed"
    variant = b.ref_variants[0]
    if ref_ok and not a.quick and not a.no_calibrate and len(b.ref_variants) > 1:
        # The reference's fastest path on this graph and machine: each candidate once.
        cal = []
        for v in b.ref_variants:
            log("%s: calibrating reference path '%s'" % (b.name, v))
            rec = run_reference(a, b, v, graph, config, b.calibrate_epochs,
                                max(b.ref_warmup, 2), -1, ctx["ref_env"], ctx["mem_limit"])
            cal.append(rec)
        entry["reference_calibration"] = cal
        good = [r for r in cal if "seconds" in r]
        if good:
            variant = min(good, key=lambda r: r["seconds"])["variant"]
    entry["reference_path"] = variant if ref_ok else None
    for rep in range(reps):
        order = ["bivouac", "reference"] if rep % 2 == 0 else ["reference", "bivouac"]
        for side in order:
            if side == "bivouac":
                log("%s: bivouac run %d/%d" % (b.name, rep + 1, reps))
                entry["runs"].append(run_bivouac(a, b, ctx["build"], ctx["env"], config, rep,
                                                 ctx["mem_limit"]))
            elif ref_ok:
                log("%s: reference (%s) run %d/%d" % (b.name, variant, rep + 1, reps))
                entry["runs"].append(run_reference(a, b, variant, graph, config, b.ref_epochs,
                                                   b.ref_warmup, rep, ctx["ref_env"],
                                                   ctx["mem_limit"]))
    for side, prefix in (("bivouac", "bivouac"), ("reference", "reference")):
        runs = [r for r in entry["runs"] if r["impl"] == side]
        secs = [r["seconds"] for r in runs if "seconds" in r]
        med, lo, hi = stats.summary(secs)
        entry[prefix + "_median_s"] = med
        entry[prefix + "_min_s"] = lo
        entry[prefix + "_max_s"] = hi
        rss = [r["peak_rss_mb"] for r in runs if r.get("peak_rss_mb")]
        entry[prefix + "_peak_rss_mb"] = max(rss) if rss else None
        errors = [r["error"] for r in runs if "error" in r]
        if errors:
            entry[prefix + "_errors"] = errors
    entry["peak_rss_mb"] = entry["bivouac_peak_rss_mb"]
    bm, rm = entry["bivouac_median_s"], entry["reference_median_s"]
    entry["speedup_vs_reference"] = (rm / bm) if bm and rm else None
    if b.plugin == "transformer" and bm:
        tokens = b.train["batch"] * b.train["block"]
        entry["bivouac_tokens_per_s"] = tokens / bm
        if rm:
            entry["reference_tokens_per_s"] = tokens / rm
    return entry


# ---- targets and the report ----------------------------------------------------------------

def derive(results, benches):
    lim = results["limits_best"]
    triad, sgemm = lim["triad_gbps"], lim["sgemm_gflops"]
    results["triad_gbps"] = triad
    results["sgemm_gflops"] = sgemm
    results["sgemm_default_core_gflops"] = lim["sgemm_default_core_gflops"]
    results["spmm_gbps"] = lim["spmm_gbps"]
    results["spmm_triad_fraction"] = (lim["spmm_gbps"] / triad) if triad and lim["spmm_gbps"] \
        else None
    results["transformer_sgemm_fraction"] = None
    targets = []
    for e in results["benchmarks"]:
        b = benches[e["name"]]
        if b.target and e.get("speedup_vs_reference") is not None:
            targets.append({"what": "%s speedup vs reference >= %.1fx" % (e["name"], b.target),
                            "value": e["speedup_vs_reference"],
                            "met": e["speedup_vs_reference"] >= b.target})
        if e["name"] == "transformer-shakespeare" and e.get("bivouac_median_s") and sgemm:
            m, t = b.model, b.train
            fpt = roofline.transformer_flops_per_token(m["layers"], m["width"], t["block"], 65,
                                                       m.get("tied", True))
            e["flops_per_token"] = fpt
            e["bivouac_gflops"] = fpt * e["bivouac_tokens_per_s"] / 1e9
            if e.get("reference_tokens_per_s"):
                e["reference_gflops"] = fpt * e["reference_tokens_per_s"] / 1e9
            results["transformer_sgemm_fraction"] = e["bivouac_gflops"] / sgemm
            if results.get("sgemm_default_core_gflops"):
                results["transformer_sgemm_default_core_fraction"] = \
                    e["bivouac_gflops"] / results["sgemm_default_core_gflops"]
        if e["name"] == "gcn-powerlaw-1m" and e.get("bivouac_median_s") and triad and sgemm:
            d = b.dataset
            n = d["nodes"]
            nnz = 2 * d["edges"] + n  # A + I; the generator makes exactly `edges` edges
            dims = [d["features"]] + [b.model["hidden"]] * (b.model["layers"] - 1) + \
                [d["classes"]]
            work = roofline.gcn_epoch(n, nnz, dims)
            e["roofline"] = dict(work)
            e["roofline_s"] = roofline.roofline_seconds(work, triad, sgemm)
            e["roofline_compulsory_s"] = roofline.roofline_seconds(work, triad, sgemm,
                                                                   "bytes_compulsory")
            e["roofline_ratio"] = e["bivouac_median_s"] / e["roofline_s"]
            targets.append({"what": "gcn-powerlaw-1m epoch <= 2x roofline",
                            "value": e["roofline_ratio"], "met": e["roofline_ratio"] <= 2.0})
        if e["name"] == "gat-powerlaw-1m" and e.get("bivouac_median_s") and triad and sgemm:
            d, m = b.dataset, b.model
            n = d["nodes"]
            nnz = 2 * d["edges"] + n  # A + I, as GAT attends over in-edges and self
            dims = [d["features"]] + [m["hidden"]] * (m["layers"] - 1) + [d["classes"]]
            work = roofline.gat_epoch(n, nnz, dims, m["heads"], m["out_heads"])
            e["roofline"] = dict(work)
            e["roofline_s"] = roofline.roofline_seconds(work, triad, sgemm)
            e["roofline_compulsory_s"] = roofline.roofline_seconds(work, triad, sgemm,
                                                                   "bytes_compulsory")
            e["roofline_ratio"] = e["bivouac_median_s"] / e["roofline_s"]
            targets.append({"what": "gat-powerlaw-1m epoch <= 2x roofline",
                            "value": e["roofline_ratio"], "met": e["roofline_ratio"] <= 2.0})
    if results["spmm_triad_fraction"] is not None:
        targets.append({"what": "SpMM (64 features) >= 50% of triad",
                        "value": results["spmm_triad_fraction"],
                        "met": results["spmm_triad_fraction"] >= 0.5})
    if results["transformer_sgemm_fraction"] is not None:
        targets.append({"what": "transformer >= 50% of sgemm",
                        "value": results["transformer_sgemm_fraction"],
                        "met": results["transformer_sgemm_fraction"] >= 0.5})
    results["targets"] = targets


def fmt_s(x):
    if x is None:
        return "-"
    return "%.4f" % x if x < 10 else "%.1f" % x


def print_table(results):
    rows = [("benchmark", "unit", "bivouac median [min-max]", "reference median [min-max]",
             "reference path", "bv/ref", "speedup", "peak RSS MB bv/ref")]
    for e in results["benchmarks"]:
        if "skipped" in e:
            continue
        bv = "%s [%s-%s]" % (fmt_s(e["bivouac_median_s"]), fmt_s(e["bivouac_min_s"]),
                             fmt_s(e["bivouac_max_s"]))
        if e.get("reference_median_s") is not None:
            ref = "%s [%s-%s]" % (fmt_s(e["reference_median_s"]), fmt_s(e["reference_min_s"]),
                                  fmt_s(e["reference_max_s"]))
        else:
            ref = e.get("reference_skipped") or "; ".join(e.get("reference_errors", []))[:60] \
                or "-"
        sp = e.get("speedup_vs_reference")
        rss = "%s/%s" % ("%.0f" % e["bivouac_peak_rss_mb"] if e.get("bivouac_peak_rss_mb")
                         else "-",
                         "%.0f" % e["reference_peak_rss_mb"] if e.get("reference_peak_rss_mb")
                         else "-")
        rows.append((e["name"], e["unit"], bv, ref, e.get("reference_path") or "-",
                     "%.2f" % (1 / sp) if sp else "-", "%.2fx" % sp if sp else "-", rss))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    print("\n".join(out))
    for e in results["benchmarks"]:
        if "skipped" in e:
            print("%s: skipped: %s" % (e["name"], e["skipped"]))
        if e.get("bivouac_tokens_per_s"):
            print("%s: bivouac %.0f tokens/s%s" % (
                e["name"], e["bivouac_tokens_per_s"],
                ", reference %.0f tokens/s" % e["reference_tokens_per_s"]
                if e.get("reference_tokens_per_s") else ""))
        if e.get("roofline_s"):
            print("%s: roofline %.3f s/epoch (compulsory-bytes bound %.3f s); bivouac is "
                  "%.2fx the roofline" % (e["name"], e["roofline_s"], e["roofline_compulsory_s"],
                                          e["roofline_ratio"]))
        for side in ("bivouac", "reference"):
            for err in e.get(side + "_errors", [])[:1]:
                print("%s: %s error: %s" % (e["name"], side, err))
    print()
    lim = results["limits"]
    print("machine limits (%d threads; best of the start and end of the run):"
          % results["threads"])
    print("  triad %s GB/s   sgemm %s GFLOP/s   bivouac SpMM %s GB/s effective (%s features) "
          "= %s of triad" % (
              "%.1f" % results["triad_gbps"] if results["triad_gbps"] else "-",
              "%.1f" % results["sgemm_gflops"] if results["sgemm_gflops"] else "-",
              "%.2f" % results["spmm_gbps"] if results["spmm_gbps"] else "-",
              lim[0].get("spmm", {}).get("features", "?"),
              "%.0f%%" % (100 * results["spmm_triad_fraction"])
              if results["spmm_triad_fraction"] is not None else "-"))
    if results["sgemm_default_core_gflops"] and \
            results["sgemm_default_core_gflops"] != results["sgemm_gflops"]:
        print("  sgemm with the OpenBLAS kernels bivouac ran with (%s): %.1f GFLOP/s" % (
            lim[0].get("sgemm", {}).get("openblas_core", "?"),
            results["sgemm_default_core_gflops"]))
    if results["transformer_sgemm_fraction"] is not None:
        print("  transformer achieved %.0f%% of sgemm%s" % (
            100 * results["transformer_sgemm_fraction"],
            " (%.0f%% of sgemm with the kernels it ran with)" % (
                100 * results["transformer_sgemm_default_core_fraction"])
            if results.get("transformer_sgemm_default_core_fraction") else ""))
    for r in lim:
        for k in ("triad", "sgemm", "sgemm_avx512", "spmm"):
            if "error" in r.get(k, {}):
                print("  %s failed: %s" % (k, r[k]["error"]))
    if results["targets"]:
        print()
        print("targets:")
        for t in results["targets"]:
            print("  %-48s %8.2f  %s" % (t["what"], t["value"], "met" if t["met"] else "MISSED"))


def source_info(src):
    def git(*args):
        r = subprocess.run(["git", "-C", src] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"dir": os.path.abspath(src), "commit": git("rev-parse", "HEAD"),
            "modified_files": len(status.splitlines()) if status else 0}


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    mem_limit = a.mem_limit_mb or 0.75 * mem_total_mb()
    source = source_info(a.source)  # before building: the state the build saw
    build, build_kind = build_bivouac(a)
    tools = build_tools(a, build)
    env = bivouac_env(a, build)
    plugins = model_plugins(build, env)
    if a.no_reference:
        reference = "--no-reference"
    elif not os.path.exists(os.path.join(a.venv, "bin", "python")):
        reference = "no %s: run bench/setup-reference.sh" % a.venv
    else:
        reference = True
    selected = [b for b in suite.BENCHMARKS
                if not a.only or any(o in b.name for o in a.only)]
    if a.quick:
        selected = [b.for_quick() for b in selected if b.quick is not None]
    limits_only = a.only and all(o == "limits" for o in a.only)
    ctx = {"build": build, "tools": tools, "env": env, "plugins": plugins,
           "reference": reference, "ref_env": reference_env(a), "mem_limit": mem_limit,
           "graphs": {}}
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = os.getloadavg()
    log("machine limits (start)")
    limits = [measure_limits(a, tools, build, env, mem_limit)]
    entries = [] if limits_only else [run_benchmark(a, b, ctx) for b in selected]
    if not a.quick:
        log("machine limits (end)")
        limits.append(measure_limits(a, tools, build, env, mem_limit))
    results = {
        "started": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.datetime.now(datetime.timezone.utc) - started)
                         .total_seconds(), 1),
        "mode": "quick" if a.quick else "full",
        "threads": a.threads,
        "openblas_coretype": {"option": a.openblas_core,
                              "bivouac_ran_with": limits[0].get("sgemm", {}).get("openblas_core")},
        "build": {"dir": build, "type": build_kind},
        "source": source,
        "machine": {"cpus": os.cpu_count(), "memory_mb": round(mem_total_mb()),
                    "processor": platform.processor() or platform.machine(),
                    "loadavg_at_start": load_start, "loadavg_at_end": os.getloadavg()},
        "reference": "enabled" if reference is True else reference,
        "limits": limits,
        "limits_best": best_limits(limits),
        "benchmarks": entries,
    }
    derive(results, {b.name: b for b in selected})
    path = os.path.join(a.out, "results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print_table(results)
    print("\nresults: %s" % path)
    failed = [e["name"] for e in entries if e.get("bivouac_errors")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
