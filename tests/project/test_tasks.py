"""tasks.py: the table of runs gives the workflow's commands, one per task and variant."""

import json

import pytest

import common
import tasks


@pytest.fixture
def ran(tmp_path, monkeypatch):
    """The commands the steps run (`python` dropped, with their thread cap), in a project at tmp_path."""
    monkeypatch.chdir(tmp_path)
    commands = []

    def fake_run(command, threads=0, log=None):
        commands.append((command[1:], threads))
        return 2.5

    monkeypatch.setattr(common, "run", fake_run)
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
            kind = "baseline" if variant == "baseline" else "elmo"
            assert config == f"project/configs/{task}_{kind}.cfg"
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
