"""tasks.py: the table of runs gives the workflow's commands, one per task and variant; the optional tasks
(CoNLL-2003, SST-5) run when their data directory is given, on any language and biLM, with no pretraining."""

import json
import shutil
from pathlib import Path

import pytest
from spacy.tokens import DocBin
from thinc.api import Config

import collect_results
import common
import tasks
from fixture_paths import FIXTURES, ROOT

EFML_MODEL = FIXTURES / "elmoformanylangs" / "word_char"


@pytest.fixture
def ran(tmp_path, monkeypatch):
    """The commands the steps run (`python` dropped, with their thread cap), in a project at tmp_path."""
    monkeypatch.chdir(tmp_path)
    commands = []

    def fake_run(command, threads=0, log=None):
        commands.append((command[1:], threads))
        return 2.5

    monkeypatch.setattr(common, "run", fake_run)
    (tmp_path / "training" / "bilm-domain" / "model").mkdir(parents=True)  # variant 'elmo' needs the biLM
    shutil.copytree(ROOT / "project" / "configs", tmp_path / "project" / "configs")
    return commands


def overrides(command):
    """{option: value} of a command's `--option value` and `--option=value` arguments."""
    found, args = {}, list(command)
    while args:
        arg = args.pop(0)
        if arg.startswith("--") and "=" in arg:
            key, _, value = arg.partition("=")
            found[key] = value
        elif arg.startswith("--"):
            found[arg] = args.pop(0) if args and not args[0].startswith("--") else True
    return found


SETTINGS = ["--threads", "1", "--gpu-id", "-1", "--seed", "0", "--max-steps", "0", "--eval-frequency", "200"]


def test_train_runs_each_task_in_each_variant(ran, tmp_path):
    tasks.main(
        ["train", "ner", "textcat", "--epochs", "ner=10", "--epochs", "textcat=3", *SETTINGS, "--pretrained-elmo="]
    )
    assert [threads for _, threads in ran] == [1] * 6
    runs = {}
    for command, _ in ran:
        assert command[:3] == ["-m", "spacy", "train"]
        options = overrides(command[4:])
        runs[options.pop("--output")] = (command[3], options)
    elmo = {"baseline": None, "elmo": "training/bilm-domain/model", "elmo_shipped": ""}
    assert sorted(runs) == sorted(f"training/{t}-{v}" for t in ("ner", "textcat") for v in elmo)
    for task, epochs in (("ner", "10"), ("textcat", "3")):
        for variant, path in elmo.items():
            config, options = runs[f"training/{task}-{variant}"]
            if variant == "baseline":
                assert config == f"project/configs/{task}_baseline.cfg"
            else:  # the shipped config with the project's changes, written beside the run
                assert config == f"training/{task}-{variant}.cfg"
                merged = Config().from_disk(config, interpolate=False)
                assert merged["components"][task]["model"]["tok2vec"]["encode"]["depth"] == 4
                assert merged["nlp"]["pipeline"] == ["elmo", task] and "project" not in merged
            assert options.pop("--paths.elmo", None) == path
            assert options == {
                "--paths.train": f"corpus/{task}/train.spacy",
                "--paths.dev": f"corpus/{task}/dev.spacy",
                "--gpu-id": "-1",
                "--system.seed": "0",
                "--training.max_epochs": epochs,
                "--training.max_steps": "0",
                "--training.eval_frequency": "200",
            }
            timing = json.loads((tmp_path / "training" / f"{task}-{variant}" / "timing.json").read_text())
            assert timing["wall_time_s"] == 2.5 and timing["command"][:3] == ["-m", "spacy", "train"]


def test_evaluate_scores_each_run_on_its_test_split(ran, tmp_path):
    tasks.main(["evaluate", "ner", "textcat", *SETTINGS])
    expected = []
    for task in ("ner", "textcat"):
        for variant in ("baseline", "elmo", "elmo_shipped"):
            run = f"{task}-{variant}"
            expected.append(
                [
                    *("-m", "spacy", "evaluate", f"training/{run}/model-best", f"corpus/{task}/test.spacy"),
                    *("--output", f"metrics/eval/{run}.json", "--per-component", "--gpu-id", "-1"),
                ]
            )
            assert (tmp_path / "metrics" / "eval" / f"{run}.timing.json").is_file()
    assert [command for command, _ in ran] == expected


def test_perplexity_on_each_heldout_text(ran, tmp_path):
    tasks.main(["perplexity", "gutenberg_test", "wikitext_valid", "--threads", "1"])
    assert [command for command, _ in ran] == [
        [
            *("-m", "spacy_elmo", "evaluate", "training/bilm/model", f"corpus/heldout/{name}.txt"),
            *("--output", f"metrics/perplexity/{name}.json"),
        ]
        for name in ("gutenberg_test", "wikitext_valid")
    ]
    for name in ("gutenberg_test", "wikitext_valid"):
        assert (tmp_path / "metrics" / "timing" / f"perplexity_{name}.json").is_file()


def test_unknown_tasks_and_variants_are_errors(ran):
    with pytest.raises(SystemExit):
        tasks.main(["train", "nope"])
    with pytest.raises(SystemExit):
        tasks.main(["train", "ner", "--variants", "baseline,nope"])
    assert not ran


def conll_file(path, n_sentences):
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(n_sentences):
        lines += [f"Word{i} NNP B-NP B-PER", "ran VBD B-VP O", ""]
    path.write_text("\n".join(lines), encoding="utf8")
    return path


def test_an_optional_task_without_data_is_skipped_and_its_stale_results_removed(tmp_path):
    metrics, corpus = tmp_path / "metrics", tmp_path / "corpus"
    (corpus / "conll").mkdir(parents=True)
    (corpus / "conll" / "train.spacy").write_text("from an earlier run")
    (metrics / "eval").mkdir(parents=True)
    stale = metrics / "eval" / "conll-baseline.json"
    stale.write_text("{}")
    keep = metrics / "eval" / "ner-baseline.json"
    keep.write_text("{}")
    tasks.main(["convert", "conll", "--conll-dir=", "--corpus", str(corpus)])
    assert (corpus / "conll").is_dir() and not any((corpus / "conll").iterdir())  # train and evaluate skip it
    tasks.main(["evaluate", "conll", "--metrics", str(metrics), "--corpus", str(corpus)])
    assert not stale.exists() and keep.exists()


def test_a_missing_data_file_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="train.txt"):
        tasks.main(["convert", "sst5", f"--sst5-dir={tmp_path}", "--corpus", str(tmp_path / "c")])


def test_an_optional_task_with_a_train_only_cap_a_test_split_and_no_pretraining(tmp_path, monkeypatch):
    commands = []

    def fake_run(command, threads=0, log=None):  # records the command; `spacy train` makes its output directory
        command = command[1:]  # without `python`
        commands.append(command)
        output = Path(command[command.index("--output") + 1])
        if command[:3] == ["-m", "spacy", "train"]:
            output.mkdir(parents=True)
        else:  # `spacy evaluate`: a score that tells the splits apart
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps({"ner": {"ents_f": 0.25 if "test" in output.name else 0.5}}))
        return 1.0

    monkeypatch.setattr(common, "run", fake_run)
    data = tmp_path / "my data"
    data.mkdir()
    conll_file(data / "train.txt", 30)
    conll_file(data / "valid.txt", 12)
    conll_file(data / "test.txt", 9)
    where = ["--metrics", str(tmp_path / "m"), "--corpus", str(tmp_path / "c"), "--training", str(tmp_path / "t")]
    tasks.main(["convert", "conll", f"--conll-dir={data}", "--max-train-docs=20", *where])
    sentences = {s: len(DocBin().from_disk(tmp_path / "c" / "conll" / f"{s}.spacy")) for s in ("train", "dev", "test")}
    assert sentences == {"train": 20, "dev": 12, "test": 9}  # the cap is the training split's only
    variants = "--variants=baseline,elmo_shipped"
    elmo = ["--elmo=does/not/exist", f"--pretrained-elmo={EFML_MODEL}"]  # no 'elmo' variant: no biLM needed
    tasks.main(["train", "conll", variants, *elmo, "--lang=ru", *where])  # a model of another language and format
    tasks.main(["evaluate", "conll", variants, *where])
    trained = [c for c in commands if c[:3] == ["-m", "spacy", "train"]]
    evaluated = [c for c in commands if c[:3] == ["-m", "spacy", "evaluate"]]
    assert all(c[c.index("--nlp.lang") + 1] == "ru" for c in trained)
    assert f"--paths.elmo={EFML_MODEL}" in trained[1] and not any("--paths.elmo" in a for a in trained[0])
    assert [c[c.index("--output") + 1].rsplit("/", 1)[1] for c in trained] == ["conll-baseline", "conll-elmo_shipped"]
    outputs = sorted(c[c.index("--output") + 1].rsplit("/", 1)[1] for c in evaluated)
    assert outputs == [
        "conll-baseline.json",
        "conll-baseline.test.json",
        "conll-elmo_shipped.json",
        "conll-elmo_shipped.test.json",
    ]
    assert all(str(tmp_path / "c" / "conll" / "test.spacy") in c for c in evaluated if c[-4].endswith(".test.json"))
    rows = collect_results.collect(
        tmp_path / "t", tmp_path / "m", tmp_path / "out", with_weights=False, allow_missing=True
    )["rows"]
    assert [(r["variant"], r["metric"], r["metric_key"], r["dev"], r["test"]) for r in rows] == [
        ("baseline", "entity F1", "ents_f", 0.5, 0.25),
        ("elmo_shipped", "entity F1", "ents_f", 0.5, 0.25),
    ]


def test_the_elmo_variant_needs_the_projects_bilm(tmp_path):
    with pytest.raises(SystemExit, match="variant 'elmo' needs the project's biLM at nowhere"):
        tasks.main(["train", "conll", "--elmo=nowhere", "--corpus", str(tmp_path / "c")])


@pytest.mark.parametrize("component", ["ner", "textcat"])
def test_the_project_elmo_configs_are_the_shipped_ones_with_only_the_changes_they_state(component, tmp_path):
    """project/configs/<component>_elmo.cfg holds what the project changes in the shipped config; filled by
    spaCy, the merged config differs from the filled shipped config in exactly those settings."""
    from spacy.cli.init_config import fill_config

    from spacy_elmo.cli.config import CONFIGS_DIR

    stated = Config().from_disk(ROOT / "project" / "configs" / f"{component}_elmo.cfg", interpolate=False)
    assert stated["project"] == {"extends": component}
    merged = common.full_config(ROOT / "project" / "configs" / f"{component}_elmo.cfg", tmp_path / "merged_filled.cfg")
    assert merged == tmp_path / "merged_filled.cfg"  # filled: `spacy train` reads it as it is
    fill_config(tmp_path / "shipped_filled.cfg", CONFIGS_DIR / f"{component}.cfg", silent=True)

    def leaves(config: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in config.items():
            out.update(leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return out

    filled = leaves(Config().from_disk(tmp_path / "merged_filled.cfg", interpolate=False))
    shipped = leaves(Config().from_disk(tmp_path / "shipped_filled.cfg", interpolate=False))
    changes = leaves({key: value for key, value in stated.items() if key != "project"})
    differing = {key for key in set(filled) | set(shipped) if filled.get(key) != shipped.get(key)}
    # a block the project replaces by a value (the learning-rate schedule by a constant) drops its keys
    replaced = {key for key in shipped if any(key.startswith(f"{change}.") for change in changes)}
    assert differing == {key for key in changes if changes[key] != shipped.get(key)} | replaced, differing
    assert all(filled[key] == value for key, value in changes.items())
