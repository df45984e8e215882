"""Turning run outputs into numbers: per-epoch (per-step) times from bivouac's
metrics.jsonl and from a reference's JSON line, and order statistics over runs."""
import json
import os


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summary(xs):
    """median, min, max of a list (None for an empty one)."""
    if not xs:
        return None, None, None
    return median(xs), min(xs), max(xs)


def bivouac_times(run_dir, kind, skip):
    """Per-epoch (graph models) or per-step (transformer) wall times of one bivouac run,
    from the "seconds" (wall time since the start of the run) of consecutive lines of
    metrics.jsonl. The first delta is epoch 2's: epoch 1 also carries the set-up. skip
    drops that many leading measurements in all (epoch 1 counts as one)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    if kind == "transformer":
        # Step lines only; a delta that spans an evaluation line is not a training step.
        times, prev, spans_eval = [], None, False
        for r in rows:
            if "train_loss" not in r or "step" not in r:
                spans_eval = True
                continue
            if prev is not None and not spans_eval:
                times.append(r["seconds"] - prev)
            prev, spans_eval = r["seconds"], False
        return times[max(skip - 1, 0):]
    secs = [r["seconds"] for r in rows if "epoch" in r]
    times = [b - a for a, b in zip(secs, secs[1:])]
    return times[max(skip - 1, 0):]


def last_json_line(text):
    """The last line of text that parses as a JSON object, or None."""
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None
