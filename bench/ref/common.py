"""Shared by the reference trainers: thread setup, hyperparameters taken from the
experiment bivouac ran (its resolved experiment.yaml), epoch timing, and the JSON line the
harness reads."""
import json
import os
import resource
import sys
import time


def set_threads(n):
    import torch
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set by an earlier parallel call
        pass


def experiment_section(path, section):
    """A section (dict) of a bivouac experiment YAML, or {} when path is None."""
    if not path:
        return {}
    import yaml
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    value = doc.get(section) or {}
    return value if isinstance(value, dict) else {}


def report(result):
    """Prints the one JSON line the harness parses (the last line of stdout)."""
    result["peak_rss_mb_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


class EpochClock:
    """Wall time per epoch with perf_counter; CPU ops are synchronous, so no sync is
    needed."""

    def __init__(self, device="cpu"):
        self.times = []
        self._t0 = None
        self._sync = None
        if str(device).startswith("cuda"):  # GPU work is asynchronous: wait for it
            import torch
            self._sync = torch.cuda.synchronize

    def start(self):
        if self._sync:
            self._sync()
        self._t0 = time.perf_counter()

    def stop(self):
        if self._sync:
            self._sync()
        self.times.append(time.perf_counter() - self._t0)


def add_device_arg(ap):
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda to time the reference on the GPU (bench/cuda.sh)")


def to_device(device, *tensors):
    """The tensors (or modules) moved to the device, in order."""
    return [t.to(device) for t in tensors]


def env_info():
    import torch
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def time_graph_training(model, opt, x, adj, y, masks, warmup, epochs, compile_model):
    """The epoch bivouac's graph trainer runs (core/src/engine/graph/train_graph.c): one
    training step (forward, cross-entropy on the train vertices, backward, optimizer step),
    then one evaluation forward pass without dropout with loss and accuracy on train, val and
    test.
    Runs `warmup` untimed epochs, then times `epochs`. Returns (times, last stats)."""
    import torch
    import torch.nn.functional as F
    fwd = torch.compile(model) if compile_model else model
    train = masks[0]

    def epoch():
        model.train()
        opt.zero_grad(set_to_none=True)
        out = fwd(x, adj)
        loss = F.cross_entropy(out[train], y[train])
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            logp = F.log_softmax(fwd(x, adj), dim=1)
            pred = logp.argmax(dim=1)
            stats = [(F.nll_loss(logp[m], y[m]).item(), (pred[m] == y[m]).float().mean().item())
                     for m in masks]
        return loss.item(), stats

    clock = EpochClock(x.device)
    last = None
    for _ in range(warmup):
        last = epoch()
    for _ in range(epochs):
        clock.start()
        last = epoch()
        clock.stop()
    return clock.times, last
