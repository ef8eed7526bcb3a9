"""The project's figures, as PNG files with labelled axes and legends.

    python project/scripts/make_plots.py --results metrics/results.json \
        --pretrain-metrics training/bilm/metrics.jsonl --output metrics/plots

- pretraining.png: training and held-out perplexity (log scale) and training loss against steps,
  from the pretraining log (one JSON object per logged step);
- layer_weights.png: per task, the softmax-normalized scalar-mix weight of each biLM layer
  (layer 0 = the character/token layer), like Figure 2 of Peters et al. (2018);
- scores.png: baseline vs ELMo on each task (test split; dev for the tasks with no public test).
"""

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

from common import VARIANTS, exit_on  # noqa: E402

# keys the pretraining log may use for each curve, first match wins
TRAIN_PPL_KEYS = ("train_ppl", "train_perplexity", "ppl")
HELDOUT_PPL_KEYS = ("dev_average_ppl", "heldout_ppl", "valid_ppl", "dev_ppl")
TRAIN_LOSS_KEYS = ("train_loss", "loss")


def set_labels(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def save(fig: Any, output: Path) -> None:
    fig.tight_layout()
    fig.savefig(output, dpi=110, bbox_inches="tight")  # "tight": a legend below the axes is kept whole
    plt.close(fig)


def legend_below(ax: Any, n_entries: int) -> None:
    """The legend under the axes, where it covers no bar whatever the weights or scores."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(2, n_entries), frameon=False)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf8").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not a JSON object ({err})") from None
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def series(records: Sequence[dict[str, Any]], keys: Sequence[str]) -> Optional[tuple]:
    """(steps, values) of the first key present, finite values only; None if no record has one."""
    for key in keys:
        points = [
            (r["step"], r[key])
            for r in records
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) and "step" in r
        ]
        if points:
            return [p[0] for p in points], [p[1] for p in points], key
    return None


def plot_pretraining(records: Sequence[dict[str, Any]], output: Path) -> None:
    train_ppl = series(records, TRAIN_PPL_KEYS)
    heldout = series(records, HELDOUT_PPL_KEYS)
    loss = series(records, TRAIN_LOSS_KEYS)
    if not (train_ppl or heldout or loss):
        raise ValueError(
            "the pretraining log has none of the keys "
            f"{TRAIN_PPL_KEYS + HELDOUT_PPL_KEYS + TRAIN_LOSS_KEYS} with a 'step'"
        )
    fig, (ax_ppl, ax_loss) = plt.subplots(1, 2, figsize=(11, 4.2))
    if train_ppl:
        ax_ppl.plot(train_ppl[0], train_ppl[1], label="training (sampled softmax, approximate)", color="tab:blue")
    if heldout:
        ax_ppl.plot(heldout[0], heldout[1], "o-", label="held-out (full softmax)", color="tab:orange")
    ax_ppl.set_yscale("log")
    set_labels(ax_ppl, "training step", "perplexity (log scale)", "biLM perplexity")
    ax_ppl.legend()
    ax_ppl.grid(alpha=0.3)
    if loss:
        ax_loss.plot(loss[0], loss[1], label=f"training loss ({loss[2]})", color="tab:green")
        ax_loss.legend()
    set_labels(ax_loss, "training step", "loss (mean negative log-likelihood, nats)", "biLM training loss")
    ax_loss.grid(alpha=0.3)
    save(fig, output)


def plot_layer_weights(rows: Sequence[dict[str, Any]], output: Path) -> None:
    weighted = [r for r in rows if r.get("layer_weights")]
    if not weighted:
        raise ValueError("no run has learned layer weights (no ELMo run in the results)")
    n_layers = max(len(r["layer_weights"]) for r in weighted)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * n_layers + 3), 4.2))
    width = 0.8 / len(weighted)
    for i, row in enumerate(weighted):
        xs = [j + (i - (len(weighted) - 1) / 2) * width for j in range(len(row["layer_weights"]))]
        label = f"{row['task']} ({row['dataset']}), {VARIANTS.get(row['variant'], row['variant'])}"
        ax.bar(xs, row["layer_weights"], width=width, label=label)
    ax.axhline(1.0 / n_layers, color="grey", linestyle="--", linewidth=1, label="plain average (1/L)")
    ax.set_xticks(range(n_layers))
    ax.set_xticklabels(["0 (token)"] + [f"{j} (LSTM {j})" for j in range(1, n_layers)])
    set_labels(ax, "biLM layer", "softmax-normalized weight", "Learned ELMo layer weights per task")
    legend_below(ax, len(weighted) + 1)
    save(fig, output)


def plot_scores(rows: Sequence[dict[str, Any]], output: Path) -> None:
    tasks: list[str] = []
    for row in rows:
        if row["task"] not in tasks:
            tasks.append(row["task"])
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    if not tasks:
        raise ValueError("no runs to plot")
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(tasks) + 2), 4.2))
    width = 0.8 / max(len(variants), 1)
    for i, variant in enumerate(variants):
        xs, ys = [], []
        for t, task in enumerate(tasks):
            row = next((r for r in rows if r["task"] == task and r["variant"] == variant), None)
            value = None if row is None else (row["test"] if row["test"] is not None else row["dev"])
            if value is not None:
                xs.append(t + (i - (len(variants) - 1) / 2) * width)
                ys.append(100 * value)
        bars = ax.bar(xs, ys, width=width, label=VARIANTS[variant])
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    labels = []
    for task in tasks:
        row = next(r for r in rows if r["task"] == task)
        split = "test" if row["test"] is not None else "dev"
        labels.append(f"{task} ({row['dataset']})\n{row['metric']}, {split}")
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(labels)
    set_labels(ax, "task", "score (%)", "Baseline vs ELMo")
    legend_below(ax, len(variants))
    save(fig, output)


def make_plots(results: Path, pretrain_metrics: Optional[Path], output: Path) -> list[Path]:
    data = json.loads(results.read_text(encoding="utf8"))
    output.mkdir(parents=True, exist_ok=True)
    written = []
    if pretrain_metrics is not None:
        plot_pretraining(read_jsonl(pretrain_metrics), output / "pretraining.png")
        written.append(output / "pretraining.png")
    plot_layer_weights(data["rows"], output / "layer_weights.png")
    plot_scores(data["rows"], output / "scores.png")
    written += [output / "layer_weights.png", output / "scores.png"]
    return written


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("metrics/results.json"))
    parser.add_argument("--pretrain-metrics", type=Path, default=None, help="the pretraining metrics.jsonl")
    parser.add_argument("--output", type=Path, default=Path("metrics/plots"))
    args = parser.parse_args(argv)
    with exit_on(FileNotFoundError, ValueError, KeyError):
        for path in make_plots(args.results, args.pretrain_metrics, args.output):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
