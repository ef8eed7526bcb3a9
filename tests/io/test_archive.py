"""A bilm-tf model in a zip archive (the NLPL repository's layout), read in place."""

import json
import re
import shutil
import struct
import subprocess
import sys
import warnings
import zipfile

import pytest
import torch
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE, FIXTURES
from spacy_elmo.cli import elmo_cli
from spacy_elmo.disk import file_sha256
from spacy_elmo.io.archive import ArchiveError
from spacy_elmo.io.resolve import load_model

META = {"id": 0, "corpus": [{"description": "the bilm-tf test fixture"}], "algorithm": {"name": "ELMo"}}


def nlpl_zip(fixture_dir, path, folder="", compression=zipfile.ZIP_DEFLATED, members=None):
    """The fixture as the NLPL repository packs a model: model.hdf5, options.json, meta.json."""
    members = members or {
        "model.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
        "options.json": (fixture_dir / "options.json").read_bytes(),
        "meta.json": json.dumps(META).encode(),
    }
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(folder + name, data)
    return path


@pytest.fixture
def unzipped(fixture_dir, tmp_path):
    target = tmp_path / "unzipped"
    target.mkdir()
    shutil.copy(fixture_dir / "lm_weights.hdf5", target / "model.hdf5")
    shutil.copy(fixture_dir / "options.json", target / "options.json")
    return target


@pytest.mark.parametrize("folder", ["", "209/"])
@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_an_nlpl_zip_loads_as_its_unzipped_directory_bit_for_bit(fixture_dir, tmp_path, unzipped, folder, compression):
    archive = nlpl_zip(fixture_dir, tmp_path / "209.zip", folder, compression)
    before = sorted(p.name for p in tmp_path.iterdir())
    zipped, plain = load_model(archive), load_model(unzipped)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing is unpacked on disk"
    a, b = zipped.bilm.state_dict(), plain.bilm.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert zipped.sha256 == plain.sha256 and zipped.describe()["sha256"] == plain.describe()["sha256"]
    assert "model.hdf5" in zipped.sha256_of
    assert zipped.source.files.zipped and json.loads(zipped.source.files.read("meta.json")) == META


def test_the_cli_and_the_pipe_take_an_archive(fixture_dir, tmp_path, unzipped):
    import spacy

    archive = nlpl_zip(fixture_dir, tmp_path / "model.zip")
    runner = CliRunner()
    verified = runner.invoke(elmo_cli, ["verify", str(archive)])
    assert verified.exit_code == 0 and load_model(archive).sha256 in verified.output, verified.output
    assert runner.invoke(elmo_cli, ["convert", str(archive), str(tmp_path / "native")]).exit_code == 0
    native = load_model(tmp_path / "native")
    weights_sha256 = file_sha256(unzipped / "model.hdf5")
    assert native.converted_from == {"format": "bilm-tf", "file": "model.hdf5", "sha256": weights_sha256}
    outputs = {}
    for name, model in (("zip", archive), ("dir", unzipped)):
        nlp = spacy.blank("xx")
        nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.BiLM.v1", "path": str(model)}})
        outputs[name] = nlp("Один два three 四")._.elmo_layers
    assert (outputs["zip"] == outputs["dir"]).all()


def test_an_archive_without_a_model_or_not_a_zip_is_named(fixture_dir, tmp_path):
    no_options = nlpl_zip(fixture_dir, tmp_path / "a.zip", members={"model.hdf5": b"x", "meta.json": b"{}"})
    with pytest.raises(
        ArchiveError, match=r"a\.zip: expected a bilm-tf model in the archive .* found meta\.json, model\.hdf5"
    ):
        load_model(no_options)
    broken = tmp_path / "b.zip"
    broken.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ArchiveError, match=r"b\.zip: not a readable zip archive"):
        load_model(broken)
    bad_weights = nlpl_zip(
        fixture_dir,
        tmp_path / "c.zip",
        members={"model.hdf5": b"junk", "options.json": (fixture_dir / "options.json").read_bytes()},
    )
    with pytest.raises(ValueError, match=r"c\.zip/model\.hdf5: not a readable HDF5 weight file"):
        load_model(bad_weights)


def test_the_zipped_fixture_reproduces_the_reference_activations(fixture_dir, tmp_path):
    """The AllenNLP reference run of the bilm-tf fixture (stateless batch 0), from its NLPL-layout zip."""
    import h5py
    import numpy

    from spacy_elmo.bilm.runner import BiLMRunner

    bilm = load_model(nlpl_zip(fixture_dir, tmp_path / "fixture.zip", "fixture/")).bilm
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    outputs = BiLMRunner(bilm).embed_sentences([groups[k][0].split() for k in range(3)])
    for k, layers in enumerate(outputs):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as handle:
            expected = handle["0"][...]  # (forward, backward) top layer
        top = layers[-1]
        got = numpy.stack([top[:, : top.shape[1] // 2], top[:, top.shape[1] // 2 :]])
        numpy.testing.assert_allclose(got, expected, atol=1e-6, rtol=1e-5)


def patch_headers(path, member, flag_bits=None, method=None, file_size=None):
    """Rewrite a member's general-purpose flags, compression method or declared (inflated) size in both its
    local header and its central directory entry, as another zip tool (or a forger) would have written them."""
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    count, _, offset = struct.unpack_from("<HII", data, end + 10)
    for _ in range(count):
        assert data[offset : offset + 4] == b"PK\x01\x02"
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, offset + 28)
        (local,) = struct.unpack_from("<I", data, offset + 42)
        if data[offset + 46 : offset + 46 + name_len].decode() == member:
            for header, shift in ((offset, 2), (local, 0)):  # the central entry's fields sit 2 bytes later
                for value, at, fmt in ((flag_bits, 6, "<H"), (method, 8, "<H"), (file_size, 22, "<I")):
                    if value is not None:
                        struct.pack_into(fmt, data, header + at + shift, value)
        offset += 46 + name_len + extra_len + comment_len
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "flag_bits, method, problem",
    [
        (0x1, None, r"encrypted \(password-protected\)"),  # ZipCrypto
        (0x1, 99, r"encrypted \(password-protected\)"),  # WinZip AES
        (None, 9, r"compressed with method 9 \(deflate64\), which Python's zipfile cannot inflate"),
        (None, 98, r"compressed with method 98 \(ppmd\)"),
    ],
)
@pytest.mark.parametrize("member", ["model.hdf5", "options.json"])
def test_an_encrypted_or_unsupported_member_is_refused_naming_archive_and_member(
    fixture_dir, tmp_path, flag_bits, method, problem, member
):
    archive = patch_headers(nlpl_zip(fixture_dir, tmp_path / "m.zip"), member, flag_bits=flag_bits, method=method)
    with pytest.raises(ArchiveError, match=rf"^{re.escape(str(archive))}/{re.escape(member)}: {problem}") as caught:
        load_model(archive)
    assert "\n" not in str(caught.value)


def test_an_encrypted_efml_member_is_refused_naming_it(tmp_path):
    directory = FIXTURES / "elmoformanylangs" / "word_char"
    archive = tmp_path / "efml.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(directory.iterdir()):
            handle.write(path, path.name)
    patch_headers(archive, "encoder.pkl", flag_bits=0x1)
    with pytest.raises(ArchiveError, match=rf"^{re.escape(str(archive))}/encoder\.pkl: encrypted"):
        load_model(archive)


def test_a_member_declaring_more_than_its_role_needs_is_refused_unread(fixture_dir, tmp_path):
    """options.json: 1 MiB at most; the weights: 8 bytes a weight the options describe and 16 MiB (the
    fixture's 0.1M weights: ~17 MiB); word.dic: 64 MiB. Zeros, so the archives stay small."""
    options = (fixture_dir / "options.json").read_bytes()
    weights = (fixture_dir / "lm_weights.hdf5").read_bytes()
    padded_options = nlpl_zip(
        fixture_dir, tmp_path / "a.zip", members={"model.hdf5": weights, "options.json": options + b" " * (1 << 20)}
    )
    with pytest.raises(
        ArchiveError,
        match=rf"a\.zip/options\.json: declares {len(options) + (1 << 20)} bytes inflated, more than a JSON file "
        r"\(options, config, meta\) can need \(1048576 bytes\); refused unread: a damaged archive or a zip bomb "
        r"\(a model really this large loads from its unzipped directory\)$",
    ):
        load_model(padded_options)
    padded_weights = nlpl_zip(
        fixture_dir, tmp_path / "b.zip", members={"model.hdf5": weights + bytes(18 << 20), "options.json": options}
    )
    with pytest.raises(
        ArchiveError,
        match=r"b\.zip/model\.hdf5: declares \d+ bytes inflated, more than the \d+ weights options\.json describes "
        r"\(8 bytes each at most, and 16 MiB\) can need \(\d+ bytes\); refused unread",
    ):
        load_model(padded_weights)
    directory = FIXTURES / "elmoformanylangs" / "word_char"
    efml = tmp_path / "efml.zip"
    with zipfile.ZipFile(efml, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(directory.iterdir()):
            padding = bytes(64 << 20) if path.name == "word.dic" else b""
            handle.writestr(path.name, path.read_bytes() + padding)
    with pytest.raises(ArchiveError, match=r"efml\.zip/word\.dic: declares \d+ bytes inflated, more than a vocabulary"):
        load_model(efml)


def test_two_models_in_one_archive_are_refused_listing_both(fixture_dir, tmp_path):
    """A model at the root and another in a folder, or one of each format: which one is meant is not known."""
    options = (fixture_dir / "options.json").read_bytes()
    weights = (fixture_dir / "lm_weights.hdf5").read_bytes()
    members = {
        "model.hdf5": weights,
        "options.json": options,
        "other/model.hdf5": weights,
        "other/options.json": options,
    }
    archive = nlpl_zip(fixture_dir, tmp_path / "two.zip", members=members)
    with pytest.raises(
        ArchiveError,
        match=r"two\.zip: holds more than one model \(at the root \(bilm-tf\): model\.hdf5, options\.json; in other/ "
        r"\(bilm-tf\): model\.hdf5, options\.json\); a model cannot be chosen inside an archive: unzip it and give "
        r"the folder \(or weight file\) of the one you mean$",
    ):
        load_model(archive)
    directory = FIXTURES / "elmoformanylangs" / "word_char"
    mixed = tmp_path / "mixed.zip"
    with zipfile.ZipFile(mixed, "w") as handle:
        for path in sorted(directory.iterdir()):
            handle.write(path, path.name)
        handle.writestr("bilm/model.hdf5", weights)
        handle.writestr("bilm/options.json", options)
    with pytest.raises(
        ArchiveError,
        match=r"mixed\.zip: holds more than one model \(at the root \(ELMoForManyLangs\): encoder\.pkl, "
        r"token_embedder\.pkl; in bilm/ \(bilm-tf\): model\.hdf5, options\.json\)",
    ):
        load_model(mixed)


def test_two_weight_files_beside_the_options_are_refused_listing_both(fixture_dir, tmp_path):
    weights = (fixture_dir / "lm_weights.hdf5").read_bytes()
    members = {
        "model.hdf5": weights,
        "weights.hdf5": weights,
        "options.json": (fixture_dir / "options.json").read_bytes(),
    }
    archive = nlpl_zip(fixture_dir, tmp_path / "w.zip", "209/", members=members)
    with pytest.raises(
        ArchiveError,
        match=r"w\.zip: holds 2 weight files beside 209/options\.json \(209/model\.hdf5, 209/weights\.hdf5\); which "
        r"one is the model's cannot be chosen inside an archive: unzip it and give the weight file you mean",
    ):
        load_model(archive)


@pytest.mark.parametrize(
    "members, said",
    [
        (["209/options.json", "209/model.hdf5", "209/model.hdf5"], r"holds 2 members named 209/model\.hdf5; "),
        (["options.json", "model.hdf5", "/options.json"], r"holds 2 members named options\.json, spelled "),
    ],
)
def test_two_members_of_one_name_are_refused_naming_it(fixture_dir, tmp_path, members, said):
    """zipfile keeps both entries and reads the last: a second options.json (tanh for relu here) or weight
    file would be read in place of the first, silently."""
    options = (fixture_dir / "options.json").read_bytes()
    data = {
        ".json": [options, options.replace(b'"relu"', b'"tanh"')],
        ".hdf5": [(fixture_dir / "lm_weights.hdf5").read_bytes()] * 2,
    }
    archive = tmp_path / "dup.zip"
    with zipfile.ZipFile(archive, "w") as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name" warning: what the test makes
        for name in members:
            handle.writestr(name, data[name[name.rindex(".") :]].pop(0))
    with pytest.raises(ArchiveError, match=rf"^{re.escape(str(archive))}: {said}.*with each file once$"):
        load_model(archive)
    done = CliRunner().invoke(elmo_cli, ["verify", str(archive)])
    assert done.exit_code == 1 and len(done.output.strip().splitlines()) == 1, done.output
    assert done.output.startswith(f"error: MODEL: {archive}: holds 2 members named "), done.output


def test_the_one_model_loads_beside_other_files(fixture_dir, tmp_path, unzipped):
    """Files that are no model's (a README at the root) leave the one model in its folder unambiguous."""
    members = {
        "209/model.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
        "209/options.json": (fixture_dir / "options.json").read_bytes(),
        "README.txt": b"ELMo for English\n",
    }
    zipped = load_model(nlpl_zip(fixture_dir, tmp_path / "r.zip", members=members))
    a, b = zipped.bilm.state_dict(), load_model(unzipped).bilm.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# The child reports its own child's peak resident set (the loader alone, not this test process).
PEAK_RSS = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "peak_kib": peak}))
"""
BOMB_BYTES = 1536 << 20  # 1.5 GiB of zeros, deflated to ~7 MB


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """options.json and a 1.5 GiB weights member of zeros, written by streaming (never held whole)."""
    archive = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    block = bytes(16 << 20)
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as handle:
        handle.writestr("options.json", (ELMO_FIXTURE / "options.json").read_bytes())
        with handle.open("model.hdf5", "w") as member:
            for _ in range(BOMB_BYTES // len(block)):
                member.write(block)
    assert archive.stat().st_size < 16 << 20
    return archive


@pytest.mark.slow
@pytest.mark.parametrize("header", ["honest", "lying"])
def test_a_zip_bomb_is_refused_in_little_memory(bomb, tmp_path, header):
    """A 1.5 GiB weights member is refused with the loader's peak RSS under 600 MB: before inflating when its
    header declares its size; when the header lies (declares 4 kB), zipfile stops at the declared size and
    the CRC refuses the member."""
    archive = tmp_path / "bomb.zip"
    shutil.copy(bomb, archive)
    if header == "lying":
        patch_headers(archive, "model.hdf5", file_size=4096)
    command = [sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "spacy_elmo", "verify", str(archive)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    report = json.loads(done.stdout)
    lines = report["stderr"].strip().splitlines()
    assert report["rc"] == 1 and len(lines) == 1, report
    refusal = (
        rf"declares {BOMB_BYTES} bytes inflated, more than .* can need \(\d+ bytes\); refused unread: .*zip bomb.*"
        if header == "honest"
        else r"cannot be read from the archive \(Bad CRC-32 for file 'model\.hdf5'\)"
    )
    assert re.fullmatch(rf"error: MODEL: {re.escape(str(archive))}/model\.hdf5: {refusal}", lines[0]), lines[0]
    assert report["peak_kib"] * 1024 < 600e6, report
