"""PyTorch reference for bivouac's transformer benchmark: nanoGPT's model (Karpathy,
model.py, with bias=False: pre-LayerNorm blocks, causal self-attention through
F.scaled_dot_product_attention, GELU MLP of 4x width, output tied to the token embedding)
and training step (random blocks of the first 90 % of the text, cross-entropy, backward,
global gradient-norm clipping, AdamW with decay on matrices only, warmup + cosine learning
rate), hyperparameters read from the experiment bivouac runs. Times training steps only.

  python transformer_torch.py --data input.txt --threads 2 --epochs 50 [--warmup 10]
                              [--compile] [--experiment EXP.yaml]

(--epochs counts optimizer steps, so the harness can treat every benchmark alike.) Prints
one JSON line with the per-step times and tokens per second."""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Block(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(width, bias=False)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.ln2 = nn.LayerNorm(width, bias=False)
        self.fc = nn.Linear(width, 4 * width, bias=False)
        self.fc_proj = nn.Linear(4 * width, width, bias=False)
        self.heads = heads
        self.dropout = dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + F.dropout(self.proj(y), self.dropout, self.training)
        x = x + F.dropout(self.fc_proj(F.gelu(self.fc(self.ln2(x)))), self.dropout,
                          self.training)
        return x


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, width, dropout, init_std):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, bias=False)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.dropout = dropout
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = init_std / math.sqrt(2 * layers) if name.endswith(("proj.weight",)) \
                    else init_std
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = F.dropout(self.wte(idx) + self.wpe(pos), self.dropout, self.training)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="the text (tiny shakespeare input.txt)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=50, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    common.add_device_arg(ap)
    ap.add_argument("--experiment", help="bivouac's experiment YAML")
    a = ap.parse_args()
    common.set_threads(a.threads)

    m = common.experiment_section(a.experiment, "model")
    t = common.experiment_section(a.experiment, "train")
    layers, heads, width = int(m.get("layers", 4)), int(m.get("heads", 4)), int(m.get("width", 128))
    dropout, init_std = float(m.get("dropout", 0.0)), float(m.get("init_std", 0.02))
    batch, block = int(t.get("batch", 12)), int(t.get("block", 64))
    lr, min_lr = float(t.get("lr", 1e-3)), float(t.get("min_lr", 1e-4))
    warmup_steps = int(t.get("warmup", 100))
    decay_steps = int(t.get("decay_steps", 2000)) or int(t.get("steps", 2000))
    wd, clip = float(t.get("weight_decay", 0.1)), float(t.get("grad_clip", 1.0))
    betas = (float(t.get("beta1", 0.9)), float(t.get("beta2", 0.99)))
    torch.manual_seed(int(t.get("seed", 1337)))

    with open(a.data, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    train = data[: int(0.9 * len(data))]

    model = GPT(len(chars), block, layers, heads, width, dropout, init_std).to(a.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)
    fwd = torch.compile(model) if a.compile else model
    model.train()

    def lr_at(step):  # nanoGPT's get_lr
        if step < warmup_steps:
            return lr * (step + 1) / (warmup_steps + 1)
        if step > decay_steps:
            return min_lr
        ratio = (step - warmup_steps) / max(decay_steps - warmup_steps, 1)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    def step(i):
        ix = torch.randint(len(train) - block - 1, (batch,))
        x = torch.stack([train[j:j + block] for j in ix])
        y = torch.stack([train[j + 1:j + 1 + block] for j in ix])
        x, y = common.to_device(a.device, x, y)
        for group in opt.param_groups:
            group["lr"] = lr_at(i)
        loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss.item()

    clock = common.EpochClock(a.device)
    loss = None
    for i in range(a.warmup):
        loss = step(i)
    for i in range(a.warmup, a.warmup + a.epochs):
        clock.start()
        loss = step(i)
        clock.stop()
    times = sorted(clock.times)
    common.report({
        "impl": "torch", "model": "transformer", "compiled": a.compile,
        "step_seconds": clock.times, "warmup": a.warmup, "train_loss": loss,
        "tokens_per_second": batch * block / times[len(times) // 2], "device": a.device,
        "hyper": {"layers": layers, "heads": heads, "width": width, "batch": batch,
                  "block": block, "vocab": len(chars)},
        **common.env_info(),
    })


if __name__ == "__main__":
    sys.exit(main())
