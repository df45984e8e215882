"""Reads a graph written by bench/src/graph_export.c (PREFIX.json + PREFIX.bin): the
same arrays bivouac trains on, as torch tensors."""
import json

import numpy as np
import torch

_DTYPES = {"int64": np.int64, "int32": np.int32, "float32": np.float32, "uint8": np.uint8}


def load(prefix):
    """Returns a dict: meta (the JSON header), rowptr, colidx (int64 tensors), x (float32,
    n x f), y (int64 labels, -1 unlabelled), and train/val/test boolean masks."""
    with open(prefix + ".json") as f:
        meta = json.load(f)
    raw = {}
    for name, s in meta["sections"].items():
        raw[name] = np.fromfile(prefix + ".bin", dtype=_DTYPES[s["dtype"]], count=s["count"],
                                offset=s["offset"])
    n, f = meta["num_nodes"], meta["num_features"]
    split = torch.from_numpy(raw["split"].copy())
    return {
        "meta": meta,
        "rowptr": torch.from_numpy(raw["rowptr"].copy()),
        "colidx": torch.from_numpy(raw["colidx"].astype(np.int64)),
        "x": torch.from_numpy(raw["features"].reshape(n, f).copy()),
        "y": torch.from_numpy(raw["labels"].astype(np.int64)),
        "train": split == 1,
        "val": split == 2,
        "test": split == 3,
    }


def edge_index(g):
    """COO edge_index (2 x nnz, int64) with row = source of the message: for the symmetric
    adjacency the CSR rows are the destinations and the columns the sources."""
    n = g["meta"]["num_nodes"]
    dst = torch.repeat_interleave(torch.arange(n), g["rowptr"][1:] - g["rowptr"][:-1])
    return torch.stack([g["colidx"], dst])


def sparse_csr(g):
    """The adjacency (no self loops, values 1) as a torch CSR tensor."""
    n = g["meta"]["num_nodes"]
    values = torch.ones(g["colidx"].numel(), dtype=torch.float32)
    return torch.sparse_csr_tensor(g["rowptr"], g["colidx"], values, size=(n, n))
