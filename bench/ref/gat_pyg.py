"""PyG reference for bivouac's GAT benchmark: the model of configs/gat-cora.yaml
(Velickovic et al. 2018: GATConv with 8 heads x 8 units, concatenated, ELU; an output
GATConv with 1 head; LeakyReLU 0.2; dropout 0.6 on each layer's input and on the attention
coefficients; a bias after each aggregation; Adam lr 0.005, weight decay 5e-4 on weights
and attention vectors, not on biases), hyperparameters read from the experiment bivouac
runs, on the same arrays (bench/src/graph_export.c), with bivouac's work per epoch (a
training step, then an evaluation forward pass: common.time_graph_training).

  python gat_pyg.py --graph PREFIX --threads 2 --epochs 20 [--warmup 3] [--compile]
                    [--experiment EXP.yaml]

The aggregation path is edge_index (gather messages per edge, softmax and scatter-add per
destination): GATConv needs per-edge attention, so it has no sparse-matrix product path
without torch_sparse. Prints one JSON line with the per-epoch times."""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

import common
import graphio


class GAT(torch.nn.Module):
    def __init__(self, f_in, classes, layers, heads, hidden, out_heads, dropout,
                 attn_dropout, slope):
        super().__init__()
        convs = []
        width = f_in
        for _ in range(layers - 1):
            convs.append(GATConv(width, hidden // heads, heads=heads, concat=True,
                                 negative_slope=slope, dropout=attn_dropout))
            width = hidden
        convs.append(GATConv(width, classes, heads=out_heads, concat=False,
                             negative_slope=slope, dropout=attn_dropout))
        self.convs = torch.nn.ModuleList(convs)
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            if i > 0:
                x = F.elu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, edge_index)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20, help="timed epochs")
    ap.add_argument("--warmup", type=int, default=3, help="untimed epochs first")
    ap.add_argument("--aggr", choices=["scatter"], default="scatter")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    common.add_device_arg(ap)
    ap.add_argument("--experiment", help="bivouac's experiment YAML: take the "
                    "hyperparameters from it")
    a = ap.parse_args()
    common.set_threads(a.threads)

    m = common.experiment_section(a.experiment, "model")
    t = common.experiment_section(a.experiment, "train")
    hyper = {"layers": int(m.get("layers", 2)), "heads": int(m.get("heads", 8)),
             "hidden": int(m.get("hidden", 64)), "out_heads": int(m.get("out_heads", 1)),
             "dropout": float(m.get("dropout", 0.6)),
             "attn_dropout": float(m.get("attn_dropout", 0.6)),
             "negative_slope": float(m.get("negative_slope", 0.2)),
             "lr": float(t.get("lr", 0.005)), "weight_decay": float(t.get("weight_decay", 5e-4))}
    torch.manual_seed(int(t.get("seed", 42)))

    g = graphio.load(a.graph)
    x, y = g["x"], g["y"]
    adj = graphio.edge_index(g)  # GATConv adds the self loops itself
    model = GAT(x.shape[1], g["meta"]["num_classes"], hyper["layers"], hyper["heads"],
                hyper["hidden"], hyper["out_heads"], hyper["dropout"], hyper["attn_dropout"],
                hyper["negative_slope"])
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": hyper["weight_decay"]},
                            {"params": no_decay, "weight_decay": 0.0}], lr=hyper["lr"])
    masks = common.to_device(a.device, g["train"], g["val"], g["test"])
    x, y, adj, model = common.to_device(a.device, x, y, adj, model)
    times, (train_loss, stats) = common.time_graph_training(
        model, opt, x, y=y, adj=adj, masks=masks, warmup=a.warmup, epochs=a.epochs,
        compile_model=a.compile)
    common.report({
        "impl": "pyg", "model": "gat", "aggr": a.aggr, "compiled": a.compile,
        "epoch_seconds": times, "warmup": a.warmup, "train_loss": train_loss,
        "val_accuracy": stats[1][1], "test_accuracy": stats[2][1], "hyper": hyper,
        **common.env_info(),
    })


if __name__ == "__main__":
    sys.exit(main())
