"""Content binding of a pretraining run (issue 22): checkpoints record the SHA-256 of the training and dev
files; `--resume` on data whose content changed is refused before anything is written, unless
`--accept-changed-data` is given, and then the change is logged and recorded in metrics.jsonl."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import elmo_cli
from spacy_elmo.pretrain import checkpoint as ckpt
from spacy_elmo.pretrain.build import pretrain
from spacy_elmo.pretrain.resume import ResumeDataError

# a 4-step run with checkpoints at steps 2 and 4; the corpus cache inside the run directory, so that a
# snapshot of the directory also shows whether the corpus was read again
FIRST = {"training.max_steps": 4, "training.checkpoint_every": 2, "training.eval_every": 0, "corpus.cache_dir": None}
MORE = {**FIRST, "training.max_steps": 6}  # resuming with a (safe) config change: config.cfg would be rewritten
ROLES = {"train": "training data", "dev": "dev data"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file's bytes and every entry's mtime under `root` (a directory's mtime changes with its entries)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in [root, *sorted(root.rglob("*"))]
    }


def append(path: Path, text: str = "\nA paragraph that was not there when the run was trained.\n") -> None:
    with open(path, "a", encoding="utf-8") as handle:  # edited in place: same file, new content
        handle.write(text)


@pytest.fixture
def data(tmp_path, sample_train, sample_dev) -> dict[str, Path]:
    """Copies of the sample, free to edit."""
    folder = tmp_path / "data"
    folder.mkdir()
    return {"train": Path(shutil.copy(sample_train, folder)), "dev": Path(shutil.copy(sample_dev, folder))}


@pytest.fixture
def config(tiny_config, data):
    def make(**overrides):
        return tiny_config(**{"paths.train": str(data["train"]), "paths.dev": str(data["dev"]), **overrides})

    return make


@pytest.fixture
def run(tmp_path, config) -> Path:
    """A 4-step run on the copies, checkpointed at steps 2 and 4."""
    out = tmp_path / "run"
    pretrain(config(**FIRST), out, log=lambda m: None)
    return out


def test_checkpoints_record_the_digest_of_every_training_and_dev_file(run, data):
    payload = ckpt.read_checkpoint(ckpt.checkpoint_path(run / "checkpoints", 4))
    assert payload["data"] == {role: [[str(path), sha256(path)]] for role, path in data.items()}


def test_resume_on_unchanged_data_continues_without_a_warning(run, config):
    said: list[str] = []
    result = pretrain(config(**MORE), run, resume=True, log=said.append)
    assert result.state.step == 6
    assert any("resumed from" in line for line in said)
    assert not [line for line in said if "warning" in line or "changed data" in line]


@pytest.mark.parametrize("role", ["train", "dev"])
def test_resume_on_data_edited_in_place_is_refused_before_anything_is_written(run, config, data, role):
    before = snapshot(run)
    old = sha256(data[role])
    append(data[role])
    with pytest.raises(ResumeDataError) as error:
        pretrain(config(**MORE), run, resume=True, log=lambda m: None)
    message = str(error.value)
    assert message.startswith("cannot resume from ") and "step_00000004.ckpt" in message
    assert f"{ROLES[role]} {data[role]}: SHA-256 {old} in the checkpoint, {sha256(data[role])} now" in message
    assert "--accept-changed-data" in message and "\n" not in message
    assert [ROLES[r] in message for r in ROLES] == [r == role for r in ROLES]  # only the data that changed
    assert snapshot(run) == before  # no config.cfg, metrics, checkpoint or corpus cache entry written


def test_the_cli_refuses_in_one_line_and_accepts_with_the_flag(run, data):
    args = ["pretrain", "pretrain_tiny.cfg", str(run), "--resume"]
    for key, value in {
        **MORE,
        "paths.train": str(data["train"]),
        "paths.dev": str(data["dev"]),
        "training.n_threads": 1,
        "training.log_every": 1000,
    }.items():
        args += [f"--{key}", "null" if value is None else str(value)]
    before = snapshot(run)
    old = sha256(data["train"])
    append(data["train"])
    new = sha256(data["train"])
    refused = CliRunner().invoke(elmo_cli, args)
    assert refused.exit_code == 1, refused.output
    errors = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot resume from") and "Traceback" not in refused.output
    assert f"training data {data['train']}: SHA-256 {old} in the checkpoint, {new} now" in errors[0]
    assert "--accept-changed-data" in errors[0]
    assert snapshot(run) == before

    accepted = CliRunner().invoke(elmo_cli, [*args, "--accept-changed-data"])
    assert accepted.exit_code == 0, accepted.output
    assert f"warning: resuming on changed training data {data['train']}: SHA-256 {old}" in accepted.output


def test_accepted_changed_data_is_logged_recorded_and_bound_from_then_on(run, config, data):
    old = sha256(data["train"])
    lines = data["train"].read_text(encoding="utf-8").splitlines(keepends=True)
    data["train"].write_text("".join(lines[:200]), encoding="utf-8")  # fewer batches an epoch than step 4's index
    new = sha256(data["train"])
    said: list[str] = []
    result = pretrain(config(**MORE), run, resume=True, log=said.append, accept_changed_data=True)
    assert result.state.step == 6 and result.state.epoch >= 1
    warning = f"warning: resuming on changed training data {data['train']}: SHA-256 {old} in the checkpoint, {new} now"
    assert any(line.startswith(warning) and "--accept-changed-data" in line for line in said), said
    assert any("continuing with epoch 1" in line for line in said)  # not a batch index past the new epoch's end
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    changed = [r for r in records if r["type"] == "data_changed"]
    assert changed == [
        {
            "type": "data_changed",
            "step": 4,
            "data": "train",
            "path": str(data["train"]),
            "checkpoint_sha256": old,
            "sha256": new,
            "accepted_with": "--accept-changed-data",
        }
    ]
    payload = ckpt.read_checkpoint(ckpt.checkpoint_path(run / "checkpoints", 6))
    assert payload["data"]["train"] == [[str(data["train"]), new]]
    # the new data is what the run is bound to now: resuming on it needs no flag
    again = pretrain(config(**{**MORE, "training.max_steps": 8}), run, resume=True, log=lambda m: None)
    assert again.state.step == 8


def test_a_file_added_to_a_training_directory_is_refused_naming_it(tmp_path, tiny_config, data):
    folder = tmp_path / "corpus"
    folder.mkdir()
    lines = data["train"].read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "a.txt").write_text("".join(lines[:2000]), encoding="utf-8")
    (folder / "b.txt").write_text("".join(lines[2000:]), encoding="utf-8")
    overrides = {**FIRST, "paths.train": str(folder), "paths.dev": None}
    out = tmp_path / "run"
    pretrain(tiny_config(**overrides), out, log=lambda m: None)
    recorded = ckpt.read_checkpoint(ckpt.checkpoint_path(out / "checkpoints", 4))["data"]
    assert [path for path, _ in recorded["train"]] == [str(folder / "a.txt"), str(folder / "b.txt")]
    assert "dev" not in recorded

    before = snapshot(out)
    (folder / "c.txt").write_text("Another file of text.\n", encoding="utf-8")
    with pytest.raises(ResumeDataError, match="c.txt: not in the checkpoint's data, [0-9a-f]{64} now"):
        pretrain(tiny_config(**{**overrides, "training.max_steps": 6}), out, resume=True, log=lambda m: None)
    assert snapshot(out) == before


def test_dev_data_named_anew_in_the_config_is_not_compared(run, config, data, tmp_path):
    other = tmp_path / "other_dev.txt"
    other.write_text("".join(data["dev"].read_text(encoding="utf-8").splitlines(keepends=True)[:300]), "utf-8")
    said: list[str] = []
    result = pretrain(config(**{**MORE, "paths.dev": str(other)}), run, resume=True, log=said.append)
    assert result.state.step == 6
    assert any("resuming with corpus.dev changed" in line for line in said)  # the config change, logged
    assert not [line for line in said if "warning" in line]
    payload = ckpt.read_checkpoint(ckpt.checkpoint_path(run / "checkpoints", 6))
    assert payload["data"]["dev"] == [[str(other), sha256(other)]]
