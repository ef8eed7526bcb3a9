"""Gather every run of the workflow into one table: metrics/results.json and metrics/results.md.

    python project/scripts/collect_results.py --training training --metrics metrics --output metrics/results

A run is a trained pipeline `training/<task>-<variant>/model-best` with its evaluation
`metrics/eval/<task>-<variant>.json` (from `spacy evaluate --per-component`) and its wall time
`training/<task>-<variant>/timing.json`. Tasks and variants are the table in common.py; optional tasks
(CoNLL-2003, SST-5) appear when they were run. The learned layer weights of every ELMo run (the softmax of
its spacy-elmo.ScalarMix.v1 layer, as in the paper's Figure 2) are read from the trained pipeline itself,
the perplexities from their JSON files.
"""

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from spacy.util import load_config
from thinc.api import Model

from common import TASKS, VARIANTS, Task, exit_on
from spacy_elmo.layers.scalar_mix import forward as scalar_mix_forward
from spacy_elmo.mix import softmax


@dataclass
class Row:
    task: str
    dataset: str
    variant: str
    metric: str
    dev: Optional[float]
    test: Optional[float]
    eval_split: str
    seed: Optional[int]
    wall_time_s: Optional[float]
    metric_key: str = ""  # the key spaCy's scorer reports it under (ents_f, cats_micro_f)
    bilm: Optional[str] = None  # the biLM an ELMo run used (its elmo pipe's model path)
    layer_weights: Optional[list[float]] = None
    gamma: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"expected output not found: {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def component_score(scores: dict[str, Any], task: Task, path: Path) -> float:
    """The task's metric from `spacy evaluate --per-component` output (or a flat score dict)."""
    source = scores.get(task.component, scores)
    if not isinstance(source, dict) or task.metric not in source:
        raise KeyError(f"{path}: no '{task.metric}' score for component '{task.component}'")
    value = source[task.metric]
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{path}: score '{task.metric}' is {value!r}, expected a finite number")
    return float(value)


def dev_score(model_dir: Path, task: Task) -> Optional[float]:
    """The dev score of the best checkpoint, as `spacy train` stored it in meta.json."""
    meta_path = model_dir / "meta.json"
    if not meta_path.exists():
        return None
    value = read_json(meta_path).get("performance", {}).get(task.metric)
    return float(value) if isinstance(value, (int, float)) else None


def bilm_source(model_dir: Path) -> Optional[str]:
    """The path the run's elmo pipe loaded its biLM from; "" means the shipped default model."""
    config_path = model_dir / "config.cfg"
    if not config_path.exists():
        return None
    elmo = load_config(config_path, interpolate=True).get("components", {}).get("elmo")
    if not elmo:
        return None
    path = elmo.get("model", {}).get("path")
    return "en_elmo_small (shipped)" if path == "" else str(path)


def training_seed(model_dir: Path) -> Optional[int]:
    config_path = model_dir / "config.cfg"
    if not config_path.exists():
        return None
    seed = load_config(config_path, interpolate=False).get("system", {}).get("seed")
    return int(seed) if isinstance(seed, int) else None


def node_mix(node: Model) -> Optional[tuple[list[float], float]]:
    """(softmax of the mix weights, gamma) if this thinc node is a spacy-elmo.ScalarMix.v1 layer, else None."""
    if node._func is not scalar_mix_forward:
        return None
    weights = softmax(node.ops.to_numpy(node.get_param("weights")).astype("float64"))  # float64, as reported
    return [float(w) for w in weights], float(node.ops.to_numpy(node.get_param("gamma"))[0])


def mix_weights(model_dir: Path) -> dict[str, tuple[list[float], Optional[float]]]:
    """Per component of a trained pipeline: (softmax of its ELMo scalar-mix weights, gamma).

    Loads the pipeline and walks each component's thinc model for its scalar-mix node.
    """
    import spacy  # the pipeline needs spacy_elmo's registered functions, found by entry point

    nlp = spacy.load(model_dir)
    found: dict[str, tuple[list[float], Optional[float]]] = {}
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is None or name == "elmo":
            continue
        for node in model.walk():
            result = node_mix(node)
            if result is not None:
                found[name] = result
                break
    return found


def collect_rows(training: Path, metrics: Path, with_weights: bool = True, allow_missing: bool = False) -> list[Row]:
    rows: list[Row] = []
    missing: list[str] = []
    for task in TASKS.values():
        for variant in VARIANTS:
            run = f"{task.name}-{variant}"
            eval_path = metrics / "eval" / f"{run}.json"
            model_dir = training / run / "model-best"
            if not eval_path.exists():
                if task.required and not allow_missing:
                    missing.append(str(eval_path))
                elif task.required:
                    print(f"warning: no results for {run} ({eval_path} not found); left out of the table")
                continue
            score = component_score(read_json(eval_path), task, eval_path)
            timing = training / run / "timing.json"
            row = Row(
                task=task.name,
                dataset=task.dataset,
                variant=variant,
                metric=task.metric_label,
                metric_key=task.metric,
                dev=dev_score(model_dir, task),
                test=score if task.eval_split == "test" else None,
                eval_split=task.eval_split,
                seed=training_seed(model_dir),
                wall_time_s=read_json(timing)["wall_time_s"] if timing.exists() else None,
            )
            if task.eval_split == "dev":
                row.dev = score  # `spacy evaluate` on the dev file
                test_path = metrics / "eval" / f"{run}.test.json"  # optional tasks given a test file
                if test_path.exists():
                    row.test = component_score(read_json(test_path), task, test_path)
            if variant != "baseline":
                row.bilm = bilm_source(model_dir)
            if with_weights and variant != "baseline":
                weights = mix_weights(model_dir).get(task.component)
                if weights is None:
                    raise ValueError(f"{model_dir}: no ELMo scalar mix found in component '{task.component}'")
                row.layer_weights, row.gamma = weights
            rows.append(row)
    if missing:
        raise FileNotFoundError("missing evaluation results for required runs: " + ", ".join(missing))
    return rows


def fmt(value: Optional[float], scale: float = 100.0) -> str:
    return "-" if value is None else f"{value * scale:.2f}"


def markdown(rows: Sequence[Row], perplexity: dict[str, Any]) -> str:
    lines = ["# spacy-elmo project results", ""]
    lines += [
        "| task | data | variant | biLM | metric | dev | test | seed | train wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wall = "-" if r.wall_time_s is None else f"{r.wall_time_s:.0f}"
        lines.append(
            f"| {r.task} | {r.dataset} | {VARIANTS[r.variant]} | {r.bilm or '-'} | {r.metric} (`{r.metric_key}`) "
            f"| {fmt(r.dev)} | {fmt(r.test)} "
            f"| {'-' if r.seed is None else r.seed} | {wall} |"
        )
    weighted = [r for r in rows if r.layer_weights]
    if weighted:
        lines += ["", "## Learned layer weights (softmax of the scalar mix; layer 0 = token layer)", ""]
        width = max(len(r.layer_weights or []) for r in weighted)
        lines.append("| task | variant | " + " | ".join(f"layer {j}" for j in range(width)) + " | gamma |")
        lines.append("|---|---|" + "---|" * (width + 1))
        for r in weighted:
            cells = [f"{w:.3f}" for w in r.layer_weights or []]
            gamma = "-" if r.gamma is None else f"{r.gamma:.3f}"
            lines.append(f"| {r.task} | {VARIANTS[r.variant]} | " + " | ".join(cells) + f" | {gamma} |")
    if perplexity:
        lines += [
            "",
            "## biLM perplexity (held-out text)",
            "",
            "| text | forward | backward | average | tokens | out of vocabulary |",
            "|---|---|---|---|---|---|",
        ]
        for name, p in perplexity.items():
            oov = f"{100 * p['oov_rate']:.1f}%" if isinstance(p.get("oov_rate"), (int, float)) else "-"
            lines.append(
                f"| {name} | {p['forward_ppl']:.1f} | {p['backward_ppl']:.1f} | {p['average_ppl']:.1f} "
                f"| {p['n_tokens']} | {oov} |"
            )
    return "\n".join(lines) + "\n"


def collect(
    training: Path, metrics: Path, output: Path, with_weights: bool = True, allow_missing: bool = False
) -> dict[str, Any]:
    rows = collect_rows(training, metrics, with_weights, allow_missing)
    perplexity = {}
    for path in sorted((metrics / "perplexity").glob("*.json")):
        data = read_json(path)
        for key in ("forward_ppl", "backward_ppl", "average_ppl", "n_tokens"):
            if key not in data:
                raise KeyError(f"{path}: missing '{key}'")
        perplexity[path.stem] = data
    result = {"rows": [asdict(r) for r in rows], "perplexity": perplexity}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    output.with_suffix(".md").write_text(markdown(rows, perplexity), encoding="utf8")
    return result


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--training", type=Path, default=Path("training"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics"))
    parser.add_argument("--output", type=Path, default=Path("metrics/results"), help="writes OUTPUT.json and OUTPUT.md")
    parser.add_argument(
        "--allow-missing", action="store_true", help="leave out runs with no results instead of failing"
    )
    args = parser.parse_args(argv)
    with exit_on(FileNotFoundError, KeyError, ValueError):
        result = collect(args.training, args.metrics, args.output, allow_missing=args.allow_missing)
    print(args.output.with_suffix(".md").read_text(encoding="utf8"))
    print(f"{len(result['rows'])} runs -> {args.output.with_suffix('.json')}, {args.output.with_suffix('.md')}")


if __name__ == "__main__":
    main()
