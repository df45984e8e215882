"""PyG reference for bivouac's GCN benchmark: the same model and hyperparameters as
configs/gcn-cora.yaml (Kipf & Welling 2017: GCNConv x 2, hidden 16, no bias, dropout 0.5
on each layer's input, ReLU, Adam lr 0.01, L2 weight decay 5e-4 on the first layer only),
on the same arrays (bench/src/graph_export.c), with the same work per epoch as bivouac's
trainer: one training step, then one evaluation forward pass with loss and accuracy on the
train, val and test vertices.

  python gcn_pyg.py --graph PREFIX --threads 2 --epochs 20 [--warmup 3]
                    [--aggr sparse|scatter] [--compile] [--experiment EXP.yaml]

--aggr picks PyG's aggregation path: 'sparse' hands GCNConv the adjacency as a torch
sparse CSR tensor (message_and_aggregate -> torch.sparse.mm), 'scatter' as edge_index
(gather the messages, then scatter-add). Both cache the normalised adjacency (cached=True),
as bivouac computes it once. Prints one JSON line with the per-epoch times."""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

import common
import graphio


class GCN(torch.nn.Module):
    """H_{l+1} = A_hat dropout(act(H_l)) W_l, act = identity for the first layer and ReLU
    after it, as in bivouac's plugins/models/gcn/gcn.c and Kipf's gcn/models.py."""

    def __init__(self, f_in, hidden, classes, layers, dropout):
        super().__init__()
        dims = [f_in] + [hidden] * (layers - 1) + [classes]
        self.convs = torch.nn.ModuleList(
            GCNConv(dims[i], dims[i + 1], cached=True, bias=False) for i in range(layers))
        self.dropout = dropout

    def forward(self, x, adj):
        for i, conv in enumerate(self.convs):
            if i > 0:
                x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, adj)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20, help="timed epochs")
    ap.add_argument("--warmup", type=int, default=3, help="untimed epochs first")
    ap.add_argument("--aggr", choices=["sparse", "scatter"], default="sparse")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    common.add_device_arg(ap)
    ap.add_argument("--experiment", help="bivouac's resolved experiment.yaml: take the "
                    "hyperparameters from it")
    a = ap.parse_args()
    common.set_threads(a.threads)

    model_cfg = common.experiment_section(a.experiment, "model")
    train_cfg = common.experiment_section(a.experiment, "train")
    hidden = int(model_cfg.get("hidden", 16))
    layers = int(model_cfg.get("layers", 2))
    dropout = float(model_cfg.get("dropout", 0.5))
    lr = float(train_cfg.get("lr", 0.01))
    wd = float(train_cfg.get("weight_decay", 5e-4))
    torch.manual_seed(int(train_cfg.get("seed", 42)))

    g = graphio.load(a.graph)
    x, y = g["x"], g["y"]
    adj = graphio.sparse_csr(g) if a.aggr == "sparse" else graphio.edge_index(g)
    model = GCN(x.shape[1], hidden, g["meta"]["num_classes"], layers, dropout)
    # Kipf: weight decay on the first layer only (PyG's examples/gcn.py does the same).
    opt = torch.optim.Adam([
        {"params": model.convs[0].parameters(), "weight_decay": wd},
        {"params": [p for c in model.convs[1:] for p in c.parameters()], "weight_decay": 0.0},
    ], lr=lr)
    masks = common.to_device(a.device, g["train"], g["val"], g["test"])
    x, y, adj, model = common.to_device(a.device, x, y, adj, model)
    times, (train_loss, stats) = common.time_graph_training(
        model, opt, x, y=y, adj=adj, masks=masks, warmup=a.warmup, epochs=a.epochs,
        compile_model=a.compile)
    common.report({
        "impl": "pyg", "model": "gcn", "aggr": a.aggr, "compiled": a.compile,
        "epoch_seconds": times, "warmup": a.warmup, "train_loss": train_loss,
        "val_accuracy": stats[1][1], "test_accuracy": stats[2][1],
        "hyper": {"hidden": hidden, "layers": layers, "dropout": dropout, "lr": lr,
                  "weight_decay": wd},
        **common.env_info(),
    })


if __name__ == "__main__":
    sys.exit(main())
