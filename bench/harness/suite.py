"""The benchmarks: each one's experiment (written out as the YAML file bivouac runs and the
reference reads its hyperparameters from), its dataset (so the reference gets the same
arrays), how many runs and epochs, and its target. One definition per benchmark, so the
two sides cannot drift apart."""
import copy

# Kipf & Welling's GCN, as configs/gcn-cora.yaml (without its early-stopping policy: every
# run trains the epochs asked for).
GCN_MODEL = {"plugin": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5}
GCN_TRAIN = {"lr": 0.01, "weight_decay": 5e-4, "seed": 42}

# Velickovic et al.'s GAT, as configs/gat-cora.yaml (hidden is heads x units per head).
GAT_MODEL = {"plugin": "gat", "layers": 2, "heads": 8, "hidden": 64, "out_heads": 1,
             "dropout": 0.6, "attn_dropout": 0.6, "negative_slope": 0.2}
GAT_TRAIN = {"lr": 0.005, "weight_decay": 5e-4, "seed": 42}

# nanoGPT's "baby" shakespeare_char configuration, as configs/transformer-shakespeare.yaml.
TRANSFORMER_MODEL = {"plugin": "transformer", "layers": 4, "heads": 4, "width": 128,
                     "dropout": 0.0, "tied": True}
TRANSFORMER_TRAIN = {"batch": 12, "block": 64, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100,
                     "decay_steps": 2000, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99,
                     "grad_clip": 1.0, "seed": 1337}

CORA = {"name": "cora", "normalize_features": True}
# PubMed is not in shared/data: the communities generator at PubMed's size. 20,000
# vertices, avg_degree 4.5 -> 45,000 undirected edges = 90,000 adjacency entries (PubMed:
# 19,717 vertices, 44,324 edges, 500 TF-IDF features with ~10 % nonzero, 3 classes).
PUBMED_SYNTH = {"synthetic": "communities", "nodes": 20000, "features": 500, "classes": 3,
                "avg_degree": 4.5, "homophily": 0.8, "feature_density": 0.1,
                "feature_signal": 0.5, "train_per_class": 20, "val": 500, "test": 1000,
                "seed": 1, "normalize_features": True}
# The scale graph: 1M vertices, 10M undirected edges (21M entries in A + I), 64 dense
# N(0, 1) features (not row-normalised: their rows sum to about zero), 8 classes.
POWERLAW_1M = {"synthetic": "powerlaw", "nodes": 1000000, "edges": 10000000, "features": 64,
               "classes": 8, "exponent": 2.1, "seed": 1, "normalize_features": False}
# A denser graph, at the size of the co-purchase graph of issue 19 (Amazon Computers:
# 13,752 vertices, ~36 neighbours on average, 767 binary bag-of-words features, 10
# classes): the communities generator at 14,000 vertices and average degree 36, binary
# features kept as they are (not row-normalised), about 38 words per vertex.
COPURCHASE_SYNTH = {"synthetic": "communities", "nodes": 14000, "features": 767,
                    "classes": 10, "avg_degree": 36, "homophily": 0.8,
                    "feature_density": 0.05, "feature_signal": 0.5, "train_per_class": 20,
                    "val": 500, "test": 1000, "seed": 1, "normalize_features": False}
# Wide and sparse: 35,000 vertices with 8,192 features of which about 33 are nonzero per
# row (density 0.004), where dense features cost 1.1 GB a copy and the sparse-feature
# path matters. The average degree (10) and the classes (10) are this benchmark's choice.
WIDE_SPARSE_SYNTH = {"synthetic": "communities", "nodes": 35000, "features": 8192,
                     "classes": 10, "avg_degree": 10, "homophily": 0.8,
                     "feature_density": 0.004, "feature_signal": 0.5,
                     "train_per_class": 20, "val": 500, "test": 1000, "seed": 1,
                     "normalize_features": True}


class Benchmark:
    def __init__(self, name, model, dataset, train, reps, epochs, ref_epochs, ref_warmup,
                 ref_script, ref_variants, quick=None, target=None, calibrate_epochs=3):
        self.name = name
        self.model = model
        self.dataset = dataset
        self.train = train
        self.reps = reps
        self.epochs = epochs  # bivouac epochs (steps for the transformer) per run
        self.ref_epochs = ref_epochs  # timed reference epochs per run
        self.ref_warmup = ref_warmup
        self.ref_script = ref_script
        self.ref_variants = ref_variants  # first is the default; --full calibrates all
        self.quick = quick  # None: not run with --quick; else overrides for it
        self.target = target  # speedup wanted over the reference
        self.calibrate_epochs = calibrate_epochs

    @property
    def plugin(self):
        return self.model["plugin"]

    @property
    def is_graph(self):
        return self.plugin in ("gcn", "gat")

    def for_quick(self):
        b = copy.deepcopy(self)
        for k, v in (self.quick or {}).items():
            setattr(b, k, v)
        return b

    def experiment(self, threads):
        """The experiment bivouac runs, as a dict (written out as JSON, which is YAML)."""
        train = dict(self.train)
        if self.plugin == "transformer":
            # Only training steps are timed: one tiny evaluation at the very end.
            train.update({"steps": self.epochs, "eval_interval": self.epochs,
                          "eval_iters": 1, "final_eval_iters": 1})
        else:
            train["epochs"] = self.epochs
        return {"name": "bench-" + self.name, "model": dict(self.model),
                "dataset": dict(self.dataset), "train": train,
                "compute": {"plugin": "cpu", "threads": threads}}


GCN_VARIANTS = ["sparse", "scatter", "sparse+compile", "scatter+compile"]
GAT_VARIANTS = ["scatter", "scatter+compile"]
TRANSFORMER_VARIANTS = ["eager", "compile"]

BENCHMARKS = [
    Benchmark("gcn-cora", GCN_MODEL, CORA, GCN_TRAIN, reps=5, epochs=60, ref_epochs=50,
              ref_warmup=5, ref_script="gcn_pyg.py", ref_variants=GCN_VARIANTS,
              quick={"reps": 2, "epochs": 15, "ref_epochs": 10, "ref_warmup": 2},
              target=2.0),
    Benchmark("gcn-pubmed-synth", GCN_MODEL, PUBMED_SYNTH, GCN_TRAIN, reps=5, epochs=40,
              ref_epochs=30, ref_warmup=5, ref_script="gcn_pyg.py", ref_variants=GCN_VARIANTS,
              quick={"reps": 1, "epochs": 8, "ref_epochs": 5, "ref_warmup": 2}, target=2.0),
    Benchmark("gcn-powerlaw-1m", GCN_MODEL, POWERLAW_1M, GCN_TRAIN, reps=3, epochs=7,
              ref_epochs=5, ref_warmup=2, ref_script="gcn_pyg.py", ref_variants=GCN_VARIANTS,
              target=2.0, calibrate_epochs=2),
    Benchmark("gat-cora", GAT_MODEL, CORA, GAT_TRAIN, reps=5, epochs=40, ref_epochs=30,
              ref_warmup=5, ref_script="gat_pyg.py", ref_variants=GAT_VARIANTS,
              quick={"reps": 1, "epochs": 8, "ref_epochs": 5, "ref_warmup": 2}, target=4.0),
    Benchmark("gat-powerlaw-1m", GAT_MODEL, POWERLAW_1M, GAT_TRAIN, reps=2, epochs=4,
              ref_epochs=3, ref_warmup=1, ref_script="gat_pyg.py", ref_variants=GAT_VARIANTS,
              target=4.0, calibrate_epochs=1),
    Benchmark("gat-copurchase-synth", GAT_MODEL, COPURCHASE_SYNTH, GAT_TRAIN, reps=3,
              epochs=20, ref_epochs=15, ref_warmup=3, ref_script="gat_pyg.py",
              ref_variants=GAT_VARIANTS, target=4.0),
    Benchmark("gcn-wide-sparse-synth", GCN_MODEL, WIDE_SPARSE_SYNTH, GCN_TRAIN, reps=3,
              epochs=20, ref_epochs=15, ref_warmup=3, ref_script="gcn_pyg.py",
              ref_variants=GCN_VARIANTS, target=2.0),
    Benchmark("gat-wide-sparse-synth", GAT_MODEL, WIDE_SPARSE_SYNTH, GAT_TRAIN, reps=3,
              epochs=10, ref_epochs=8, ref_warmup=2, ref_script="gat_pyg.py",
              ref_variants=GAT_VARIANTS, target=4.0),
    Benchmark("transformer-shakespeare", TRANSFORMER_MODEL, {"name": "tinyshakespeare"},
              TRANSFORMER_TRAIN, reps=3, epochs=80, ref_epochs=60, ref_warmup=10,
              ref_script="transformer_torch.py", ref_variants=TRANSFORMER_VARIANTS,
              quick={"reps": 1, "epochs": 25, "ref_epochs": 15, "ref_warmup": 5},
              target=1.2, calibrate_epochs=15),
]

# Leading measurements dropped from each bivouac run: epoch 1 (or the first steps) also
# pays for set-up, first touches and the thread pool's start.
BIVOUAC_SKIP = {"gcn": 1, "gat": 1, "transformer": 5}


def export_args(dataset, data_dir):
    """graph_export's arguments for a dataset section (bench/src/graph_export.c)."""
    normalize = ["--normalize", "1" if dataset.get("normalize_features", True) else "0"]
    if "name" in dataset:
        return ["--dir", "%s/%s" % (data_dir, dataset["name"])] + normalize
    args = ["--synthetic", dataset["synthetic"]]
    for k, v in dataset.items():
        if k not in ("synthetic", "normalize_features", "cache"):
            args += ["--" + k.replace("_", "-"), str(v)]
    return args + normalize


def limits_params(quick):
    """Sizes of the machine-limit microbenchmarks."""
    if quick:
        return {"triad": {"mb": 128, "reps": 8}, "sgemm": {"n": 1024, "reps": 4},
                "spmm": {"nodes": 100000, "edges": 1000000, "features": 64, "reps": 4}}
    return {"triad": {"mb": 256, "reps": 20}, "sgemm": {"n": 2048, "reps": 6},
            "spmm": {"nodes": 1000000, "edges": 10000000, "features": 64, "reps": 5}}
