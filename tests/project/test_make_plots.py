"""The plots, from a results table of made-up runs (no training needed)."""

import json
import math

import matplotlib.image
import pytest

import collect_results
import make_plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plots_are_pngs_with_content(tmp_path, make_runs, fake_weights):
    make_runs(tmp_path)
    collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "metrics" / "results")
    log = tmp_path / "metrics.jsonl"
    records = [{"type": "eval", "step": 0, "dev_average_ppl": 9000.0}]
    for step in range(10, 110, 10):
        loss = 9.0 - step / 20
        records.append({"type": "train", "step": step, "train_loss": loss, "train_ppl": math.exp(loss)})
    records.append({"type": "eval", "step": 100, "dev_average_ppl": 300.0})
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    written = make_plots.make_plots(tmp_path / "metrics" / "results.json", log, tmp_path / "plots")
    assert sorted(p.name for p in written) == ["layer_weights.png", "pretraining.png", "scores.png"]
    for path in written:
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.shape[0] >= 300 and image.shape[1] >= 500
        assert image.std() > 0.01


def test_pretraining_plot_needs_known_keys(tmp_path):
    with pytest.raises(ValueError, match="none of the keys"):
        make_plots.plot_pretraining([{"step": 1, "something": 2.0}], tmp_path / "x.png")


@pytest.mark.parametrize("plot", ["plot_layer_weights", "plot_scores"])
def test_the_legend_covers_no_bar(tmp_path, make_runs, fake_weights, monkeypatch, plot):
    make_runs(tmp_path)
    collect_results.collect(tmp_path / "training", tmp_path / "metrics", tmp_path / "metrics" / "results")
    rows = json.loads((tmp_path / "metrics" / "results.json").read_text())["rows"]
    figures = []
    monkeypatch.setattr(make_plots, "save", lambda fig, output: figures.append(fig))
    getattr(make_plots, plot)(rows, tmp_path / "plot.png")
    (fig,) = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [patch.get_window_extent(renderer) for patch in ax.patches]
    assert len(bars) >= 4
    assert not any(legend.overlaps(bar) for bar in bars)
    assert not legend.overlaps(ax.get_window_extent(renderer))  # below the axes, not inside them
    make_plots.plt.close(fig)
