"""What `embed` is given: input text that does not decode, other encodings, an empty input, an output that
is the input or a directory, and devices this machine does not have: one-line errors (or a one-line
warning) before anything is written, through the CLI and the Python API."""

import codecs
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy
import pytest
import torch
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE
from kills import sha256_of
from spacy_elmo.cli import elmo_cli
from spacy_elmo.embed import EmbedSettings, EmbedWarning, embed_file
from spacy_elmo.embed.store import FORMAT, partial_dir

TEXT = "The café opened .\nNaïve readers smile .\nA third line ."
SETTINGS = EmbedSettings(model=str(ELMO_FIXTURE))


def embed_cli(input_path, out, *options):
    return CliRunner().invoke(elmo_cli, ["embed", str(ELMO_FIXTURE), str(input_path), str(out), *options])


def refused(result, *said):
    """The CLI refused with exit 1 and one `error:` line holding every string of `said`, no traceback."""
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit)), (
        result.output
    )
    errors = re.findall(r"error: [^\r\n]*", result.output)
    assert len(errors) == 1 and all(part in errors[0] for part in said), result.output
    return errors[0]


def read_all(path):
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle.keys()}, json.loads(handle.attrs["binding"])["settings"]


def nothing_written(out):
    return not out.exists() and not partial_dir(out).exists() and not list(out.parent.glob(f"{out.name}.tmp*"))


@pytest.mark.parametrize(
    "encoded,said",
    [
        (TEXT.encode("latin-1"), "input.txt, line 1, byte 7: not valid UTF-8 (invalid continuation byte: 20 after e9)"),
        (
            codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"),
            "input.txt, line 1, byte 0: starts with a UTF-16 (little-endian) byte-order mark",
        ),
        (
            codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"),
            "input.txt, line 1, byte 0: starts with a UTF-16 (big-endian) byte-order mark",
        ),
        (
            codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"),
            "input.txt, line 1, byte 0: starts with a UTF-32 (little-endian) byte-order mark",
        ),
        (
            codecs.BOM_UTF32_BE + TEXT.encode("utf-32-be"),
            "input.txt, line 1, byte 0: starts with a UTF-32 (big-endian) byte-order mark",
        ),
        (
            "A valid first line .\nbroken \xff here\n".encode("latin-1"),
            "input.txt, line 2, byte 28: not valid UTF-8 (invalid start byte: ff)",
        ),
    ],
    ids=["latin-1", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "line 2"],
)
def test_input_that_is_not_utf8_is_refused_naming_line_and_byte(tmp_path, encoded, said):
    path = tmp_path / "input.txt"
    path.write_bytes(encoded)
    out = tmp_path / "out.hdf5"
    refused(embed_cli(path, out), said, "--encoding")
    assert nothing_written(out)
    with pytest.raises(ValueError, match=re.escape(said)):
        embed_file(path, out, SETTINGS)
    assert nothing_written(out)


def test_jsonl_that_is_not_utf8_is_refused_too(tmp_path):
    path = tmp_path / "input.jsonl"
    path.write_bytes(json.dumps({"text": "ok"}).encode() + b"\n" + '{"text": "caf\xe9"}\n'.encode("latin-1"))
    out = tmp_path / "out.hdf5"
    refused(embed_cli(path, out), "input.jsonl, line 2, byte 28: not valid UTF-8")
    assert nothing_written(out)


def test_other_encodings_are_read_with_encoding_and_bound_to_the_output(tmp_path):
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text(TEXT, encoding="utf-8")
    expected, settings = read_all_of(utf8, tmp_path / "utf8.hdf5")
    assert settings["encoding"] == "utf-8"
    for name, data, encoding in (
        ("bom.txt", codecs.BOM_UTF8 + TEXT.encode("utf-8"), "utf-8"),  # a UTF-8 byte-order mark is skipped
        ("latin.txt", TEXT.encode("latin-1"), "latin-1"),
        ("utf16.txt", TEXT.encode("utf-16"), "UTF16"),
        ("cp1252.txt.gz", None, "cp1252"),
    ):
        path = tmp_path / name
        if data is None:
            with gzip.open(path, "wb") as handle:
                handle.write(TEXT.encode("cp1252"))
        else:
            path.write_bytes(data)
        out = tmp_path / f"{name}.hdf5"
        result = embed_cli(path, out, "--encoding", encoding)
        assert result.exit_code == 0, result.output
        got, settings = read_all(out)
        assert got.keys() == expected.keys() and all(numpy.array_equal(got[k], expected[k]) for k in expected), name
        canonical = codecs.lookup(encoding).name
        assert settings["encoding"] == canonical, name
    # the same bytes read in another encoding are another text: a resumed run must not mix them
    result = embed_cli(tmp_path / "latin.txt", tmp_path / "latin.txt.hdf5", "--encoding", "cp1252")
    refused(result, "settings.encoding: 'iso8859-1' then, 'cp1252' now")


def read_all_of(path, out):
    embed_file(path, out, SETTINGS)
    return read_all(out)


def test_an_unknown_encoding_is_a_one_line_error(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out.hdf5"
    refused(embed_cli(path, out, "--encoding", "klingon"), "--encoding 'klingon' is not an encoding")
    refused(embed_cli(path, out, "--encoding", "base64"), "--encoding 'base64' is not a text encoding")
    with pytest.raises(ValueError, match="--encoding 'klingon' is not an encoding"):
        EmbedSettings(model=str(ELMO_FIXTURE), encoding="klingon")
    refused(embed_cli(path, out, "--encoding", "utf-16"), "input.txt, line 1, byte 0: not valid utf-16")
    assert nothing_written(out)


@pytest.mark.parametrize("name,said", [("empty.txt", "has no lines"), ("empty.jsonl", "has no records")])
def test_an_empty_input_writes_an_empty_output_and_says_so(tmp_path, name, said):
    path = tmp_path / name
    path.write_bytes(b"")
    out = tmp_path / "out.hdf5"
    result = embed_cli(path, out)
    assert result.exit_code == 0, result.output
    warned = re.findall(r"warning: [^\r\n]*", result.stderr)
    assert warned == [f"warning: {path} {said}; wrote an empty {out}"], result.stderr
    # on a line of its own, as a log keeps it: not after the progress bar's carriage return
    assert f"\n{warned[0]}\n" in result.stderr, repr(result.stderr)
    with h5py.File(out, "r") as handle:
        assert len(handle) == 0 and handle.attrs["n_input_lines"] == 0 and handle.attrs["complete"]
    with pytest.warns(EmbedWarning, match=f"{name} {said}; wrote an empty"):
        assert embed_file(path, tmp_path / "api.hdf5", SETTINGS) == 0


def test_an_output_that_is_the_input_is_refused_before_anything_is_touched(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    before = sha256_of(path)
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    hard = tmp_path / "hard.txt"
    hard.hardlink_to(path)
    for out in (path, tmp_path / "." / "input.txt", link, hard):
        refused(embed_cli(path, out), f"{out}: OUTPUT is the input file {path}; give another output name")
        with pytest.raises(ValueError, match="OUTPUT is the input file"):
            embed_file(path, out, SETTINGS)
    assert sha256_of(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.txt", "input.txt", "link.txt"]


def test_an_output_that_is_a_directory_is_refused_naming_it(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "outputs"
    out.mkdir()
    refused(embed_cli(path, out), f"{out}: OUTPUT is a directory")
    with pytest.raises(ValueError, match="OUTPUT is a directory"):
        embed_file(path, out, SETTINGS)
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["input.txt", "outputs"]
    refused(embed_cli(out, tmp_path / "o.hdf5"), f"{out}: INPUT is a directory")


@pytest.mark.parametrize(
    "device,said",
    [
        ("tpu", "--device: 'tpu' is not a device; use cpu, cuda or cuda:N"),
        ("mps", "--device: 'mps': spacy-elmo runs on cpu or cuda[:N], not mps"),
        ("cuda", "--device: 'cuda': this machine has no CUDA device that torch can use"),
        ("cuda:1", "--device: 'cuda:1': this machine has no CUDA device"),
    ],
)
def test_a_device_this_machine_does_not_have_is_a_one_line_error(tmp_path, monkeypatch, device, said):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine with a GPU
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out.hdf5"
    refused(embed_cli(path, out, "--device", device), said)
    assert nothing_written(out)
    with pytest.raises(ValueError, match=re.escape(said)):
        EmbedSettings(model=str(ELMO_FIXTURE), device=device)


def test_a_launchers_local_rank_beyond_the_gpus_is_a_one_line_error(tmp_path, monkeypatch):
    """`--device cuda` under torchrun means cuda:LOCAL_RANK (`device_for_rank`), which must exist too."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out.hdf5"
    with pytest.raises(  # cuda exists here, cuda:1 does not: refused with the settings, before any file is read
        ValueError,
        match=r"^--device: 'cuda:1': this machine has 1 CUDA device.*cuda under a launcher is cuda:LOCAL_RANK",
    ):
        embed_file(path, out, EmbedSettings(model=str(ELMO_FIXTURE), device="cuda"), shard=(1, 2))
    assert nothing_written(out) and not list(tmp_path.glob("out.shard*"))


def test_a_pipe_as_input_is_refused_before_it_is_read(tmp_path):
    """It was read twice (checked, then embedded): the output was empty and the run said finished."""
    read, write = os.pipe()
    os.write(write, TEXT.encode())
    os.close(write)
    pipe = f"/dev/fd/{read}"  # what `<(...)` gives, and /dev/stdin under `|`
    out = tmp_path / "out.hdf5"
    try:
        refused(embed_cli(pipe, out), f"{pipe}: INPUT is a pipe/FIFO: embed needs a file it can read again", "write it")
        with pytest.raises(ValueError, match="INPUT is a pipe/FIFO"):
            embed_file(Path(pipe), out, SETTINGS)
        assert os.read(read, 100) == TEXT.encode(), "nothing was read from it"
    finally:
        os.close(read)
    assert nothing_written(out)


@pytest.mark.slow
def test_stdin_and_a_named_fifo_are_refused_without_waiting(tmp_path):
    """`printf ... | embed m /dev/stdin out` wrote an empty output; a named FIFO hung, waiting for a writer."""
    out = tmp_path / "out.hdf5"
    command = [sys.executable, "-m", "spacy_elmo", "embed", str(ELMO_FIXTURE)]
    piped = subprocess.run([*command, "/dev/stdin", str(out)], input=TEXT, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 1 and "/dev/stdin: INPUT is a pipe/FIFO" in piped.stderr, piped.stderr[-2000:]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    named = subprocess.run([*command, str(fifo), str(out)], capture_output=True, text=True, timeout=120)
    assert named.returncode == 1 and f"{fifo}: INPUT is a pipe/FIFO" in named.stderr, named.stderr[-2000:]
    assert nothing_written(out)
    # a file given as stdin is a file: it is read again as any file is
    with open(tmp_path / "in.txt", "w", encoding="utf-8") as handle:
        handle.write(TEXT)
    with open(tmp_path / "in.txt", encoding="utf-8") as handle:
        given = subprocess.run([*command, "/dev/stdin", str(out)], stdin=handle, capture_output=True, timeout=120)
    assert given.returncode == 0 and len(read_all(out)[0]) == 3, given.stderr[-2000:]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_utf16_or_utf32_without_a_byte_order_mark_is_refused_naming_it(tmp_path, encoding):
    """ASCII in UTF-16 is valid UTF-8 with NULs between: it was embedded as garbage and said finished."""
    for name, content in (("ascii.txt", "A plain line .\nAnother one .\n"), ("accents.txt", TEXT)):
        path = tmp_path / name
        path.write_bytes(content.encode(encoding))
        out = tmp_path / f"{name}.hdf5"
        said = refused(embed_cli(path, out), f"{path}, line 1, byte ", "UTF-16 or UTF-32 without a byte-order mark")
        assert said.endswith(f"--encoding {encoding}"), said
        assert nothing_written(out)
        with pytest.raises(ValueError, match="UTF-16 or UTF-32 without a byte-order mark"):
            embed_file(path, out, SETTINGS)


def test_a_byte_order_mark_is_skipped_with_an_explicit_encoding_too(tmp_path):
    """`--encoding utf-16-le` on a file with its mark embedded U+FEFF as the start of the first word."""
    utf8 = tmp_path / "utf8.txt"
    utf8.write_text(TEXT, encoding="utf-8")
    expected, _ = read_all_of(utf8, tmp_path / "utf8.hdf5")
    for encoding, mark in (("utf-16-le", codecs.BOM_UTF16_LE), ("utf-32-be", codecs.BOM_UTF32_BE)):
        path = tmp_path / f"{encoding}.txt"
        path.write_bytes(mark + TEXT.encode(encoding))
        out = tmp_path / f"{encoding}.hdf5"
        result = embed_cli(path, out, "--encoding", encoding)
        assert result.exit_code == 0, result.output
        got, _ = read_all(out)
        assert got.keys() == expected.keys() and all(numpy.array_equal(got[k], expected[k]) for k in expected)


def test_an_existing_file_that_is_no_output_is_refused_without_advice_to_delete_it(tmp_path):
    """ "not a readable HDF5 file ...; delete it and run again" about the user's own text file."""
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    victim = tmp_path / "notes.txt"
    victim.write_text("my notes\n", encoding="utf-8")
    said = refused(embed_cli(path, victim), f"{victim}: OUTPUT exists and is not an embed output (not HDF5)")
    assert "delete" not in said and said.endswith("give another output name"), said
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as handle:
        handle["x"] = numpy.arange(3)
    said = refused(embed_cli(path, other), f"{other}: OUTPUT exists and is not an embed output of this version")
    assert f"(no {FORMAT!r} binding); give another output name" in said
    assert victim.read_text(encoding="utf-8") == "my notes\n" and not partial_dir(victim).exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # never opened (it would wait for a writer)
    refused(embed_cli(path, fifo), f"{fifo}: OUTPUT exists and is not a regular file")
