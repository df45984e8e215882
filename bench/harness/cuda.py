"""bivouac's cuda plugin against PyTorch / PyTorch Geometric on the same GPU (issue 17).

  python3 bench/harness/cuda.py --bin DIR --tools DIR --data-dir DIR --out DIR
                                [--reps 2] [--only limits,spmm,gcn,gat,transformer,accuracy]
                                [--base-bin DIR]   (--only profile: an op profile, A/B)
                                [--acc-configs A.yaml,B.yaml] [--acc-jobs J]

--bin holds the bivouac binary (with plugins/ beside it); --tools the bench tools built by
bench/Makefile (spmm, graph_export). The references run with the python3 that has torch and
torch_geometric (the GPU machines' own). Each benchmark alternates bivouac and the
reference, `--reps` runs each, and reports medians; the GPU's limits are measured in the
same run: device-memory bandwidth by a copy kernel (torch's), cuBLAS sgemm in float32 and
TF32 (torch.mm). Targets: GCN and GAT epochs >= 2x PyG's, SpMM >= 50 % of the copy
bandwidth, transformer >= 1.2x PyTorch's tokens/s. Prints a table last; JSON in --out."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path.insert(0, HERE)
import stats  # noqa: E402
import suite  # noqa: E402


def run(argv, timeout=900, env=None, lib_first=None):
    """argv's process; bivouac's own programs get BIVOUAC_LIB_PATH as their library path
    (a machine without bivouac's packages: scripts/cuda-device-check.sh), after lib_first
    where given (another build's libbivouac), the references the python's own."""
    lib = os.environ.get("BIVOUAC_LIB_PATH")
    if lib and argv[0] != sys.executable:
        env = dict(env or os.environ, LD_LIBRARY_PATH=lib_first + ":" + lib if lib_first
                   else lib)
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        sys.stderr.write("FAILED (%d): %s\n%s\n" % (p.returncode, " ".join(argv),
                                                    p.stderr[-3000:]))
    return p, time.time() - t0


def limits():
    import torch
    dev = torch.device("cuda")
    n = 1 << 28  # 1 GiB of float32 each way
    x = torch.rand(n, device=dev)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        t0 = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    copy_gbps = 2 * 4 * n / stats.median(ts) / 1e9
    out = {"gpu": torch.cuda.get_device_name(0), "copy_gbps": copy_gbps}
    m = 8192
    a = torch.rand(m, m, device=dev)
    b = torch.rand(m, m, device=dev)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for _ in range(3):
            torch.mm(a, b)
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            torch.mm(a, b)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        out["sgemm_tf32_tflops" if tf32 else "sgemm_tflops"] = 2 * m ** 3 / stats.median(ts) / 1e12
    return out


def spmm(a, lim):
    """The plugin's SpMM at the GCN's widths (8 and 16) and the bench's 64, with its default
    kernels and with ordered_sums (the cpu plugin's edge order), alternated."""
    rows = []
    for f in (8, 16, 64):
        for rep in range(a.reps):
            for sums in ("split", "ordered"):
                p, _ = run([os.path.join(a.tools, "spmm"), "--plugin-dir",
                            os.path.join(a.bin, "plugins"), "--plugin", "cuda", "--features",
                            str(f), "--reps", "10",
                            "--set", "ordered_sums=" + ("true" if sums == "ordered" else "false")])
                if p.returncode == 0:
                    doc = stats.last_json_line(p.stdout)
                    doc["sums"], doc["rep"] = sums, rep
                    doc["of_copy"] = doc["spmm_median_gbps"] / lim["copy_gbps"] if lim else None
                    rows.append(doc)
    return rows


def write_config(a, b, plugin):
    exp = b.experiment(1)
    exp["compute"] = {"plugin": plugin}
    path = os.path.join(a.out, "%s-%s.yaml" % (b.name, plugin))
    with open(path, "w") as f:
        json.dump(exp, f, indent=2)
    return path


def bivouac_run(a, b, config, rep):
    d = os.path.join(a.out, "runs", "%s-%d" % (b.name, rep))
    p, wall = run([os.path.join(a.bin, "bivouac"), "run", config, "--out", d, "--quiet",
                   "--force"])
    if p.returncode != 0:
        return None
    times = stats.bivouac_times(d, b.plugin, suite.BIVOUAC_SKIP[b.plugin])
    return stats.median(times) if times else None


def reference_run(a, b, config, graph):
    argv = [sys.executable, os.path.join(BENCH, "ref", b.ref_script), "--device", "cuda",
            "--epochs", str(b.ref_epochs), "--warmup", str(b.ref_warmup),
            "--experiment", config]
    if b.is_graph:
        argv += ["--graph", graph, "--aggr", b.ref_variants[0]]
    else:
        argv += ["--data", os.path.join(a.data_dir, "tinyshakespeare", "input.txt")]
    p, _ = run(argv)
    if p.returncode != 0:
        return None
    doc = stats.last_json_line(p.stdout)
    times = doc.get("epoch_seconds") or doc.get("step_seconds") or []
    return stats.median(times) if times else None


def versus(a, name):
    b = next(x for x in suite.BENCHMARKS if x.name == name)
    config = write_config(a, b, "cuda")
    graph = None
    if b.is_graph:
        graph = os.path.join(a.out, "graph-" + name)
        run([os.path.join(a.tools, "graph_export"), "--out", graph] +
            suite.export_args(b.dataset, a.data_dir))
    ours, theirs = [], []
    for rep in range(a.reps):  # alternated
        t = bivouac_run(a, b, config, rep)
        if t:
            ours.append(t)
        t = reference_run(a, b, config, graph)
        if t:
            theirs.append(t)
    mo, mt = stats.median(ours), stats.median(theirs)
    row = {"name": name, "bivouac_s": mo, "reference_s": mt, "runs": [ours, theirs],
           "speedup": mt / mo if mo and mt else None, "target": b.target}
    if not b.is_graph and mo:
        tokens = b.train["batch"] * b.train["block"]
        row["bivouac_tok_s"], row["reference_tok_s"] = tokens / mo, tokens / mt if mt else None
    return row


PROFILE_LINE = re.compile(r"compute cuda profile: (\S+)\s+(\d+) calls\s+([\d.]+) s"
                          r"\s+[\d.]+ us/call \(GPU\s+([\d.]+) us\)")


def profile_ops(lines):
    """{op: [calls, seconds, gpu_seconds]} summed over a run's instances, from the plugin's
    "compute cuda profile: OP N calls T s U us/call (GPU G us) ..." lines."""
    ops = {}
    for x in lines:
        m = PROFILE_LINE.search(x)
        if m:
            calls, secs, gpu_us = int(m.group(2)), float(m.group(3)), float(m.group(4))
            o = ops.setdefault(m.group(1), [0, 0.0, 0.0])
            o[0] += calls
            o[1] += secs
            o[2] += gpu_us * calls / 1e6
    return ops


def profile(a):
    """Each model's epochs (steps) on the GPU with the plugin's op profile
    (BIVOUAC_CUDA_PROFILE): where the time goes, op by op, and between ops. Each graph model
    runs twice, for E and 2E epochs: the difference of the two profiles over E is an epoch
    in steady state (the plugin's totals include epoch 1's set-up, first touches and
    cuBLAS's first calls). With --base-bin, the same runs with that build too, alternated
    (an A/B of a change); each model also runs with compute.ordered_sums (the cpu plugin's
    summation order in SpMM and the gathers)."""
    rows = []
    bins = [("new", a.bin)] + ([("base", a.base_bin)] if a.base_bin else [])
    short = {"gcn-powerlaw-1m": 4, "gat-powerlaw-1m": 2, "transformer-shakespeare": 60}
    ordered = ["-s", "compute.ordered_sums=true"]
    variants = {"gcn-powerlaw-1m": [[], ordered], "gat-powerlaw-1m": [[], ordered]}
    for name, epochs in short.items():
        b = next(x for x in suite.BENCHMARKS if x.name == name)
        lengths = [epochs] if b.plugin == "transformer" else [epochs, 2 * epochs]
        for rep in range(a.reps):
            for (label, bindir), extra in ((x, v) for v in variants.get(name, [[]])
                                           for x in bins):
                label += " ".join([""] + extra[1::2])
                ops_by_length = []
                for n in lengths:
                    exp = b.experiment(1)
                    exp["compute"] = {"plugin": "cuda"}
                    if b.plugin == "transformer":
                        exp["train"].update({"steps": n, "eval_interval": n})
                    else:
                        exp["train"]["epochs"] = n
                    config = os.path.join(a.out, "profile-%s-%d.yaml" % (name, n))
                    with open(config, "w") as f:
                        json.dump(exp, f, indent=2)
                    d = os.path.join(a.out, "profile", "%s-%s-%d-%d" % (
                        name, label.replace(" ", "_"), n, rep))
                    env = dict(os.environ, BIVOUAC_CUDA_PROFILE="1",  # each build its plugins
                               BIVOUAC_PLUGIN_PATH=os.path.join(bindir, "plugins"))
                    p, wall = run([os.path.join(bindir, "bivouac"), "run", config, "--out", d,
                                   "--quiet", "--force", "--no-plot"] + extra, env=env,
                                  lib_first=os.path.join(os.path.dirname(bindir), "lib"))
                    times = stats.bivouac_times(d, b.plugin, suite.BIVOUAC_SKIP[b.plugin]) \
                        if p.returncode == 0 else []
                    lines = [x for x in p.stderr.splitlines() if "compute cuda" in x]
                    ops_by_length.append(profile_ops(lines))
                    rows.append({"name": name, "build": label, "rep": rep, "epochs": n,
                                 "rc": p.returncode,
                                 "median_s": stats.median(times) if times else None,
                                 "times": times, "wall_s": wall, "log": lines})
                    print("%-24s %-26s %3d rc=%d median %s s  %s" % (
                        name, label, n, p.returncode, rows[-1]["median_s"],
                        " ".join("%.4f" % t for t in times)), flush=True)
                    if rep == 0 and b.plugin == "transformer":
                        for x in lines[:24]:
                            print("    " + x, flush=True)
                if len(ops_by_length) == 2:  # an epoch in steady state, op by op
                    short_run, long_run = ops_by_length
                    epoch = {op: [(v[i] - short_run.get(op, [0, 0.0, 0.0])[i]) / epochs
                                  for i in range(3)] for op, v in long_run.items()}
                    rows[-1]["steady_epoch_ops"] = epoch
                    print("    an epoch in steady state (%d epochs less %d, over %d):" % (
                        2 * epochs, epochs, epochs), flush=True)
                    for op, (calls, secs, gpu) in sorted(epoch.items(),
                                                         key=lambda kv: -kv[1][1]):
                        if calls > 0:
                            print("    %-30s %6.1f calls %8.2f ms (GPU %8.2f ms) %8.1f us/call"
                                  % (op, calls, 1e3 * secs, 1e3 * gpu, 1e6 * secs / calls),
                                  flush=True)
    return rows


def config_seed(path):
    """train.seed of a config in flow style (configs/*.yaml: `seed: 42`)."""
    with open(path) as f:
        m = re.search(r"\bseed:\s*(\d+)", f.read())
    return int(m.group(1)) if m else None


def accuracy(a):
    """Test accuracy over 10 seeds (those of --repeat 10: the config's seed and the next 9),
    each back end's; with --acc-jobs J the seeds run as J processes at once (J runs of
    --repeat 10/J from their first seed), which gives the same runs as one --repeat 10."""
    import concurrent.futures
    rows = []
    for config in a.acc_configs.split(","):
        repeat = 10
        path = os.path.join(REPO, "configs", config)
        row = {"config": config, "seeds": repeat}
        seed0 = config_seed(path)
        jobs = a.acc_jobs if seed0 is not None and repeat % a.acc_jobs == 0 else 1
        for plugin in a.acc_plugins.split(","):
            def one(j):
                d = os.path.join(a.out, "acc", "%s-%s-%d" % (config, plugin, j))
                argv = [os.path.join(a.bin, "bivouac"), "run", path, "--out", d, "--quiet",
                        "--force", "--no-plot", "--repeat", str(repeat // jobs),
                        "-s", "compute.plugin=" + plugin]
                if jobs > 1:
                    argv += ["--seed", str(seed0 + j * (repeat // jobs))]
                p, _ = run(argv)
                if p.returncode != 0:
                    return None
                with open(os.path.join(d, "result.json")) as f:
                    doc = json.load(f)
                return [r["test_accuracy"] for r in doc["runs"]] if "runs" in doc \
                    else [doc["test_accuracy"]]
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
                parts = list(ex.map(one, range(jobs)))
            if all(x is not None for x in parts):
                accs = [x for part in parts for x in part]
                row[plugin] = sum(accs) / len(accs)
                row[plugin + "_seeds"] = accs
            row[plugin + "_wall_s"] = time.time() - t0
            print("accuracy %s on %s: %s (%d seeds in %d processes, %.0f s)" % (
                config, plugin, row.get(plugin), repeat, jobs, row[plugin + "_wall_s"]),
                flush=True)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--base-bin", help="a second build's bin folder, for profile's A/B")
    ap.add_argument("--acc-plugins", default="cpu,cuda",
                    help="the back ends accuracy runs (cpu's may come from another machine: "
                    "its kernels give the same bits for any thread count)")
    ap.add_argument("--acc-configs",
                    default="gcn-cora.yaml,gcn-citeseer.yaml,gat-cora.yaml,gat-citeseer.yaml")
    ap.add_argument("--acc-jobs", type=int, default=1,
                    help="processes each accuracy row's 10 seeds share (1, 2, 5 or 10)")
    ap.add_argument("--only", default="limits,spmm,gcn,gat,transformer,accuracy")
    a = ap.parse_args()
    a.out, a.data_dir = os.path.abspath(a.out), os.path.abspath(a.data_dir)
    os.makedirs(a.out, exist_ok=True)
    res = {}

    def save():  # after each part: a run cut short keeps what it measured
        with open(os.path.join(a.out, "cuda-bench.json"), "w") as f:
            json.dump(res, f, indent=1)

    names = {"gcn": "gcn-powerlaw-1m", "gat": "gat-powerlaw-1m",
             "transformer": "transformer-shakespeare"}
    lim = None
    for part in a.only.split(","):  # in the order given
        if part == "limits":
            lim = res["limits"] = limits()
        elif part == "spmm":
            res["spmm"] = spmm(a, lim)
        elif part in names:
            res[part] = versus(a, names[part])
        elif part == "accuracy":
            res["accuracy"] = accuracy(a)
        elif part == "profile":
            res["profile"] = profile(a)
        else:
            sys.exit("unknown part '%s'" % part)
        save()
    if lim:
        print("GPU %s: copy %.0f GB/s, sgemm %.1f TFLOP/s fp32, %.1f TF32" % (
            lim["gpu"], lim["copy_gbps"], lim["sgemm_tflops"], lim["sgemm_tf32_tflops"]))
    for r in res.get("spmm", []):
        print("spmm f=%d %-7s rep %d: %.2f ms, %.0f GB/s effective = %.0f %% of copy" % (
            r["features"], r["sums"], r["rep"], 1e3 * r["spmm_median_s"],
            r["spmm_median_gbps"], 100 * (r["of_copy"] or 0)))
    for key in ("gcn", "gat", "transformer"):
        r = res.get(key)
        if r:
            print("%-24s bivouac %s s  reference %s s  speedup %s (target %s)" % (
                r["name"], r["bivouac_s"], r["reference_s"],
                "%.2f" % r["speedup"] if r["speedup"] else "-", r["target"]))
    for r in res.get("accuracy", []):
        print("%-18s %d seeds: cpu %s  cuda %s" % (r["config"], r["seeds"], r.get("cpu"),
                                                 r.get("cuda")))


if __name__ == "__main__":
    main()
