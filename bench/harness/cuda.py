"""bivouac's cuda plugin against PyTorch / PyTorch Geometric on the same GPU (issue 17).

  python3 bench/harness/cuda.py --bin DIR --tools DIR --data-dir DIR --out DIR
                                [--reps 2] [--only limits,spmm,gcn,gat,transformer,accuracy]
                                [--base-bin DIR]   (--only profile: an op profile, A/B)

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
    rows = []
    for f in (16, 64):
        p, _ = run([os.path.join(a.tools, "spmm"), "--plugin-dir", os.path.join(a.bin, "plugins"),
                    "--plugin", "cuda", "--features", str(f), "--reps", "10"])
        if p.returncode == 0:
            doc = stats.last_json_line(p.stdout)
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


def profile(a):
    """Each model's epochs (steps) on the GPU with the plugin's op profile
    (BIVOUAC_CUDA_PROFILE): where the time goes, op by op, and between ops. With
    --base-bin, the same runs with that build too, alternated (an A/B of a change)."""
    rows = []
    bins = [("new", a.bin)] + ([("base", a.base_bin)] if a.base_bin else [])
    short = {"gcn-powerlaw-1m": 5, "gat-powerlaw-1m": 3, "transformer-shakespeare": 60}
    variants = {"gcn-powerlaw-1m": [[], ["-s", "engine.intervals=16"]],
                "gat-powerlaw-1m": [[], ["-s", "engine.intervals=16"]]}
    for name, epochs in short.items():
        b = next(x for x in suite.BENCHMARKS if x.name == name)
        exp = b.experiment(1)
        exp["compute"] = {"plugin": "cuda"}
        if b.plugin == "transformer":
            exp["train"].update({"steps": epochs, "eval_interval": epochs})
        else:
            exp["train"]["epochs"] = epochs
        config = os.path.join(a.out, "profile-%s.yaml" % name)
        with open(config, "w") as f:
            json.dump(exp, f, indent=2)
        for rep in range(a.reps):
            for (label, bindir), extra in ((x, v) for v in variants.get(name, [[]])
                                           for x in bins):
                label += " ".join([""] + extra[1::2])
                d = os.path.join(a.out, "profile", "%s-%s-%d" % (name, label.replace(" ", "_"),
                                                                rep))
                env = dict(os.environ, BIVOUAC_CUDA_PROFILE="1",  # each build its plugins
                           BIVOUAC_PLUGIN_PATH=os.path.join(bindir, "plugins"))
                p, wall = run([os.path.join(bindir, "bivouac"), "run", config, "--out", d,
                               "--quiet", "--force", "--no-plot"] + extra, env=env,
                              lib_first=os.path.join(os.path.dirname(bindir), "lib"))
                times = stats.bivouac_times(d, b.plugin, suite.BIVOUAC_SKIP[b.plugin]) \
                    if p.returncode == 0 else []
                lines = [x for x in p.stderr.splitlines() if "compute cuda" in x]
                rows.append({"name": name, "build": label, "rep": rep, "rc": p.returncode,
                             "median_s": stats.median(times) if times else None,
                             "times": times, "wall_s": wall, "log": lines})
                print("%-24s %-26s rc=%d median %s s  %s" % (
                    name, label, p.returncode, rows[-1]["median_s"],
                    " ".join("%.4f" % t for t in times)), flush=True)
                if rep == 0:
                    for x in lines[:24]:
                        print("    " + x, flush=True)
    return rows


def accuracy(a):
    rows = []
    for config, repeat in (("gcn-cora.yaml", 10), ("gcn-citeseer.yaml", 10),
                           ("gat-cora.yaml", 10), ("gat-citeseer.yaml", 10)):
        row = {"config": config, "seeds": repeat}
        for plugin in a.acc_plugins.split(","):
            d = os.path.join(a.out, "acc", "%s-%s" % (config, plugin))
            p, wall = run([os.path.join(a.bin, "bivouac"), "run",
                           os.path.join(REPO, "configs", config), "--out", d, "--quiet",
                           "--force",
                           "--repeat", str(repeat), "-s", "compute.plugin=" + plugin])
            if p.returncode == 0:
                with open(os.path.join(d, "result.json")) as f:
                    row[plugin] = json.load(f).get("test_accuracy")
            row[plugin + "_wall_s"] = wall
            print("accuracy %s on %s: %s (%.0f s)" % (config, plugin, row.get(plugin), wall),
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
        print("spmm f=%d: %.2f ms, %.0f GB/s effective = %.0f %% of copy" % (
            r["features"], 1e3 * r["spmm_median_s"], r["spmm_median_gbps"],
            100 * (r["of_copy"] or 0)))
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
