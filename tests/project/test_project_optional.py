"""Optional tasks (CoNLL-2003, SST-5): skipped cleanly when no data directory is given."""

import json

import pytest

import optional_task


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
