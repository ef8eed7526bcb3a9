"""A model's files read the same from a directory and from a zip archive's folder, each read hashed."""

import hashlib
import zipfile

import pytest

from spacy_elmo.io.archive import ArchiveError, Limit
from spacy_elmo.io.files import ModelFiles


@pytest.fixture
def containers(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "options.json").write_bytes(b"{}")
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        handle.writestr("209/options.json", b"{}")
    return ModelFiles(directory), ModelFiles(archive, "209/")


def test_a_directory_and_an_archive_folder_read_alike(containers, tmp_path):
    plain, zipped = containers
    digest = hashlib.sha256(b"{}").hexdigest()
    for files in containers:
        assert files.read("options.json") == b"{}" and files.digests == {"options.json": digest}
        assert files.sha256("options.json") == digest and files.exists("options.json")
        assert not files.exists("vocab.txt")
    assert plain.where("options.json") == str(tmp_path / "model" / "options.json") and not plain.zipped
    assert zipped.where("options.json") == f"{tmp_path / 'model.zip'}/209/options.json" and zipped.zipped
    assert plain.path("options.json") == tmp_path / "model" / "options.json" and zipped.path("options.json") is None


def test_a_missing_file_is_named_and_a_member_read_within_its_limit(containers):
    plain, zipped = containers
    with pytest.raises(FileNotFoundError, match=r"model/vocab\.txt: missing"):
        plain.read("vocab.txt")
    with pytest.raises(FileNotFoundError, match=r"model\.zip/209/vocab\.txt: missing from the archive"):
        zipped.sha256("vocab.txt")
    with pytest.raises(ArchiveError, match=r"model\.zip/209/options\.json: declares 2 bytes inflated, more than x"):
        zipped.read("options.json", Limit(1, "x"))
    assert zipped.digests == {}  # nothing recorded for what was not read
