"""Optional tasks (CoNLL-2003, SST-5): skipped cleanly when no data directory is given."""

import json
from pathlib import Path

import pytest

import common
import optional_task
from fixture_paths import FIXTURES

EFML_MODEL = FIXTURES / "elmoformanylangs" / "word_char"


def test_an_empty_data_dir_skips_and_removes_stale_results(tmp_path):
    metrics = tmp_path / "metrics"
    (metrics / "eval").mkdir(parents=True)
    stale = metrics / "eval" / "conll-baseline.json"
    stale.write_text("{}")
    keep = metrics / "eval" / "ner-baseline.json"
    keep.write_text("{}")
    optional_task.main(["conll", "--data-dir=", "--metrics", str(metrics)])
    marker = json.loads((metrics / "optional" / "conll.json").read_text())
    assert marker["skipped"] is True
    assert not stale.exists() and keep.exists()


def test_a_missing_data_file_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="train.txt"):
        optional_task.main(
            ["sst5", f"--data-dir={tmp_path}", "--metrics", str(tmp_path / "m"), "--corpus", str(tmp_path / "c")]
        )


def conll_file(path, n_sentences):
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(n_sentences):
        lines += [f"Word{i} NNP B-NP B-PER", "ran VBD B-VP O", ""]
    path.write_text("\n".join(lines), encoding="utf8")
    return path


def test_any_file_names_a_train_only_cap_a_test_split_and_no_pretraining(tmp_path, monkeypatch):
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
    args = [
        "conll",
        f"--train={conll_file(data / 'a.conll', 30)}",
        f"--dev={conll_file(data / 'b.iob', 12)}",
        f"--test={conll_file(data / 'c.txt', 9)}",
        "--max-train-docs=20",
        "--variants=baseline,elmo_shipped",
        "--elmo=does/not/exist",  # not needed: no 'elmo' variant
        f"--pretrained-elmo={EFML_MODEL}",  # a model of another language and format
        "--lang=ru",
        *("--metrics", str(tmp_path / "m"), "--corpus", str(tmp_path / "c"), "--training", str(tmp_path / "t")),
    ]
    optional_task.main(args)
    marker = json.loads((tmp_path / "m" / "optional" / "conll.json").read_text())
    assert marker["sentences"] == {"train": 20, "dev": 12, "test": 9}  # the cap is the training split's only
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
    assert marker["results"] == [
        {"variant": "baseline", "metric": "entity F1 (ents_f)", "dev": 0.5, "test": 0.25},
        {"variant": "elmo_shipped", "metric": "entity F1 (ents_f)", "dev": 0.5, "test": 0.25},
    ]


def test_the_elmo_variant_needs_the_projects_bilm(tmp_path):
    with pytest.raises(SystemExit, match="variant 'elmo' needs the project's biLM at nowhere"):
        optional_task.main(
            [
                "conll",
                f"--train={conll_file(tmp_path / 'a', 3)}",
                f"--dev={conll_file(tmp_path / 'b', 3)}",
                "--elmo=nowhere",
                *("--metrics", str(tmp_path / "m"), "--corpus", str(tmp_path / "c")),
            ]
        )
