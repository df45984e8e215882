"""Work models: how many bytes and FLOPs a GCN or GAT epoch must move and compute, and how many
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


def gat_epoch(n, nnz, dims, heads, out_heads):
    """One bivouac GAT epoch (train step + evaluation forward), as gcn_epoch models GCN's,
    for layer widths dims = [features, hidden..., classes] (a hidden layer has `heads`
    heads of hidden / heads units, concatenated; the output layer `out_heads` heads of
    `classes` units, averaged) on n vertices whose adjacency with self loops has nnz
    entries. Returns dict(flops, bytes, bytes_compulsory).

    The passes are those of an implementation that fuses what can be fused: the edge pass
    (scores, LeakyReLU, softmax over each vertex's in-edges, attention dropout) reads the
    CSR and one source score per edge and head and writes the weights alpha once; dropout
    masks are recomputed, never stored. Streaming model per edge pass: the CSR arrays once
    (int64 rowptr, int32 colidx), K floats per edge for each per-edge array read or
    written, one source row (K scores, or z = K x units features) per edge gathered, and
    the per-vertex rows once. Compulsory: each gathered row once per vertex instead.
    FLOPs: the dense projections (2 n f z) and the aggregations (2 nnz z each); the edge
    arithmetic (a few operations per edge and head) is not counted, being small next to
    the bytes it moves."""
    flops = 0.0
    logical = 0.0
    compulsory = 0.0
    csr = 8 * (n + 1) + 4 * nnz

    def dense(read, write):
        nonlocal logical, compulsory
        b = F32 * (read + write)
        logical += b
        compulsory += b

    def edge_pass(k, per_edge_arrays, gathered_width, vertex_floats, flop_width=0):
        """per_edge_arrays arrays of k floats per edge streamed, a gathered source row of
        gathered_width floats per edge, vertex_floats per-vertex floats read or written."""
        nonlocal flops, logical, compulsory
        base = csr + F32 * (per_edge_arrays * k * nnz + vertex_floats)
        logical += base + F32 * gathered_width * nnz
        compulsory += base + F32 * gathered_width * n
        flops += 2.0 * nnz * flop_width

    def gemm(m, kk, c):
        nonlocal flops
        flops += 2.0 * m * kk * c
        dense(m * kk, m * c)

    layers = len(dims) - 1
    shape = []
    for l in range(layers):
        last = l == layers - 1
        k = out_heads if last else heads
        hd = dims[-1] if last else dims[l + 1] // heads
        shape.append((dims[l], k, hd))
    for training in (True, False):  # the train step's forward, then the evaluation's
        for l, (fin, k, hd) in enumerate(shape):
            z = k * hd
            if training or l > 0:  # dropout (train) and/or ELU (l > 0) over the input
                dense(n * fin, n * fin)
            gemm(n, fin, z + 2 * k)  # Z and the two attention terms per head
            edge_pass(k, 1, k, 2 * k * n)  # alpha written; s_src gathered; s_dst read
            edge_pass(k, 1, z, z * n, z)  # out = sum alpha Z: alpha read, Z gathered
        c = dims[-1]
        dense(n * c, n * c if training else 0)  # softmax-xent (+ gradient)
    for l in reversed(range(layers)):  # backward
        fin, k, hd = shape[l]
        z = k * hd
        edge_pass(k, 1, z, z * n, z)  # dZ via the transpose: alpha read, dY rows gathered
        edge_pass(k, 1, z, z * n, z)  # dalpha: dY row per vertex, Z rows gathered, dalpha out
        edge_pass(k, 2, k, 4 * k * n)  # scores again (s_src gathered), dalpha read; dsrc/ddst
        gemm(fin, n, z)  # dW = X^T dZ
        if l > 0:
            gemm(n, z, fin)  # dX = dZ W^T
            dense(2 * n * fin, n * fin)  # ELU and dropout backward
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
