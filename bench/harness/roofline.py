"""Work models: how many bytes and FLOPs a GCN epoch must move and compute, and how many
FLOPs a transformer token costs. With the machine limits measured in the same run they give
the roofline estimates the targets are checked against (docs/benchmarks.md)."""

F32 = 4


def spmm_traffic(n, nnz, f):
    """Bytes of one A_hat X product over all n rows at f features, in the streaming model:
    the CSR arrays once (int64 rowptr, int32 colidx, float values), one row of X read per
    nonzero (no reuse assumed), Y written once. Also the compulsory bytes, where each row of
    X is read once (perfect reuse)."""
    csr = 8 * (n + 1) + (4 + F32) * nnz
    logical = csr + F32 * nnz * f + F32 * n * f
    compulsory = csr + 2 * F32 * n * f
    return logical, compulsory


def gcn_epoch(n, nnz, dims):
    """One bivouac GCN epoch (train step + evaluation forward) for layer widths
    dims = [features, hidden..., classes] on n vertices whose normalised adjacency (self
    loops included) has nnz entries. Returns dict(flops, bytes, bytes_compulsory).
    Dense kernels read their inputs once and write their outputs once; weights are small
    and not counted."""
    flops = 0.0
    logical = 0.0
    compulsory = 0.0

    def dense(read, write):
        nonlocal logical, compulsory
        b = F32 * (read + write)
        logical += b
        compulsory += b

    def spmm(f):
        nonlocal flops, logical, compulsory
        lo, co = spmm_traffic(n, nnz, f)
        flops += 2.0 * nnz * f
        logical += lo
        compulsory += co

    def gemm(m, k, c):
        nonlocal flops
        flops += 2.0 * m * k * c
        dense(m * k, m * c)

    layers = len(dims) - 1
    for training in (True, False):  # the train step's forward, then the evaluation's
        for l in range(layers):
            fin, fout = dims[l], dims[l + 1]
            if training or l > 0:  # dropout (train) and/or ReLU (l > 0) over the input
                dense(n * fin, n * fin)
            gemm(n, fin, fout)
            spmm(fout)
        dense(n * dims[-1], n * dims[-1] if training else 0)  # softmax-xent (+ gradient)
    for l in reversed(range(layers)):  # backward
        fin, fout = dims[l], dims[l + 1]
        spmm(fout)  # A_hat^T dY
        gemm(fin, n, fout)  # dW = X^T dZ (reads X and dZ)
        if l > 0:
            gemm(n, fout, fin)  # dX = dZ W^T
            dense(2 * n * fin, n * fin)  # ReLU and dropout backward
    return {"flops": flops, "bytes": logical, "bytes_compulsory": compulsory}


def roofline_seconds(work, triad_gbps, sgemm_gflops, bytes_key="bytes"):
    """Bytes at triad bandwidth plus FLOPs at the sgemm rate (no overlap assumed)."""
    return work[bytes_key] / (triad_gbps * 1e9) + work["flops"] / (sgemm_gflops * 1e9)


def transformer_flops_per_token(layers, width, block, vocab, tied=True):
    """nanoGPT's estimate (model.py, estimate_mfu; PaLM appendix B): 6 N + 12 L H Q T per
    token for forward and backward, N the parameters without the position embedding."""
    per_block = 3 * width * width + width * width + 2 * 4 * width * width + 2 * width
    n = layers * per_block + vocab * width + width + (0 if tied else vocab * width)
    return 6.0 * n + 12.0 * layers * width * block
