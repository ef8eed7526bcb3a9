"""Tarballs unpacked once into the cache: from the local server (by name, by URL, a TF-Hub module's
`?tf-hub-format=compressed`) and from a local path, each loading bit for bit as the same files in a folder;
a killed or half unpack finished by the next run; a member out of the folder, an absolute one, a link out, or
a cut tarball refused naming the file. Companion files: an alignment matrix fetched beside the weights (the
folder still loads), a role the hub does not know left alone."""

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy
import pytest

from fixture_paths import ELMO_FIXTURE, FIXTURES
from kills import at_call, run_killed
from spacy_elmo.hub import download
from spacy_elmo.hub.download import DownloadError, resolve_model_source
from spacy_elmo.hub.unpack import MAX_MEMBERS, UNPACKED_FOLDER, TarballError, tar_problem, unpacked
from spacy_elmo.io.alignment import read_alignment
from spacy_elmo.io.resolve import load_model

pytestmark = pytest.mark.timeout(120)  # a local server, a forked child
MODEL_FILES = {"options.json": ELMO_FIXTURE / "options.json", "lm_weights.hdf5": ELMO_FIXTURE / "lm_weights.hdf5"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tarball(members: dict[str, object], mode: str = "w:gz") -> bytes:
    """A tarball of `members`: name -> bytes (a file), None (a folder), ("symlink"|"hardlink", target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                assert isinstance(content, bytes)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


MODEL_TARBALL = tarball({"model/": None, **{f"model/{n}": p.read_bytes() for n, p in MODEL_FILES.items()}})


@pytest.fixture
def model_folder(tmp_path) -> Path:
    """The same two files as the tarball's, in a folder."""
    folder = tmp_path / "folder"
    folder.mkdir()
    for name, path in MODEL_FILES.items():
        shutil.copyfile(path, folder / name)
    return folder


def test_a_tarball_by_name_is_unpacked_once_and_loads_as_its_folder(server, cache, use_catalog, model_folder):
    server.files["models/elmo.tar.gz"] = MODEL_TARBALL
    use_catalog([{"name": "test/tar", "urls": {"archive": server.url("models/elmo.tar.gz")}}])
    path = resolve_model_source("test/tar", progress=False)
    assert path == cache / UNPACKED_FOLDER / sha256(MODEL_TARBALL) / "model"  # the one folder inside it
    assert sorted(p.name for p in path.iterdir()) == ["lm_weights.hdf5", "options.json"]
    assert load_model(path).sha256 == load_model(model_folder).sha256
    assert load_model("test/tar").sha256 == load_model(model_folder).sha256  # through io.resolve, once more
    assert server.hits("models/elmo.tar.gz") == [None]  # downloaded once, unpacked once
    archive = download.local_files({"archive": server.url("models/elmo.tar.gz")})["archive"]
    assert archive.read_bytes() == MODEL_TARBALL  # kept, with its record, beside nothing unpacked
    assert sorted(p.name for p in archive.parent.iterdir()) == [
        ".elmo.tar.gz.lock",
        "elmo.tar.gz",
        "elmo.tar.gz.sha256",
    ]


def test_a_local_tarball_is_unpacked_into_the_cache_by_its_digest(server, cache, tmp_path, model_folder):
    local = tmp_path / "mine.tgz"
    local.write_bytes(MODEL_TARBALL)
    path = resolve_model_source(local)
    assert path == cache / UNPACKED_FOLDER / sha256(MODEL_TARBALL) / "model"
    assert load_model(str(local)).sha256 == load_model(model_folder).sha256
    server.files["elmo.tar.gz"] = MODEL_TARBALL  # the same bytes from a URL: the same folder
    assert resolve_model_source(server.url("elmo.tar.gz"), progress=False) == path
    plain = tmp_path / "plain.tar"
    plain.write_bytes(tarball({f"m/{n}": p.read_bytes() for n, p in MODEL_FILES.items()}, mode="w"))
    assert load_model(plain).sha256 == load_model(model_folder).sha256
    assert resolve_model_source(model_folder) == model_folder  # a folder (or any other file) passes through


def test_a_tfhub_module_asked_for_compressed_is_unpacked(server, cache, use_catalog):
    module = tarball({"saved_model.pb": b"graph", "tfhub_module.pb": b"module", "variables/": None})
    server.files["google/elmo/3"] = module  # tfhub.dev answers ?tf-hub-format=compressed with a .tar.gz
    url = server.url("google/elmo/3?tf-hub-format=compressed")
    use_catalog([{"name": "test/hub", "format": "tfhub", "urls": {"archive": url}}])
    path = resolve_model_source("test/hub", progress=False)
    assert path == cache / UNPACKED_FOLDER / sha256(module)  # several entries at the top: the folder itself
    assert sorted(p.name for p in path.iterdir()) == ["saved_model.pb", "tfhub_module.pb", "variables"]
    other = server.url("google/elmo/2?tf-hub-format=compressed")  # a URL the catalog lacks: by its query
    server.files["google/elmo/2"] = module
    assert resolve_model_source(other, progress=False) == path


@pytest.mark.parametrize(
    "layout, path",
    [
        ("google", "google/elmo/3?tf-hub-format=compressed"),  # tfhub.dev's compressed download
        ("deeppavlov", "deeppavlov_data/elmo_ru-news_wmt11-16_1.5M_steps.tar.gz"),  # DeepPavlov's tarball
    ],
)
def test_a_tfhub_module_by_name_loads_as_its_folder(server, cache, use_catalog, layout, path):
    """The Google and DeepPavlov layouts (tests/fixtures/tfhub, made with TensorFlow) by name from a local
    server: unpacked, read without TensorFlow, the same model as the module's folder."""
    folder = FIXTURES / "tfhub" / layout
    members = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    server.files[path.split("?")[0]] = tarball({"variables/": None, **members})
    use_catalog([{"name": f"test/{layout}", "format": "tfhub", "urls": {"archive": server.url(path)}}])
    by_name, local = load_model(f"test/{layout}"), load_model(folder)
    assert by_name.source.kind == "tfhub" and by_name.sha256 == local.sha256
    pairs = zip(by_name.bilm.state_dict().values(), local.bilm.state_dict().values())
    assert all(numpy.array_equal(a, b) for a, b in pairs)


def test_a_half_unpack_left_behind_is_finished_by_the_next_run(cache, tmp_path, model_folder):
    local = tmp_path / "m.tar.gz"
    local.write_bytes(MODEL_TARBALL)
    digest = sha256(MODEL_TARBALL)
    leftover = cache / UNPACKED_FOLDER / f"{digest}.tmp99999999" / "model"
    leftover.mkdir(parents=True)
    (leftover / "options.json").write_bytes(b'{"lstm": ')  # what a killed run wrote
    path = resolve_model_source(local)
    assert path == cache / UNPACKED_FOLDER / digest / "model" and not leftover.parent.exists()
    assert load_model(path).sha256 == load_model(model_folder).sha256


def test_an_intact_folder_is_reused_without_its_tarball_and_a_changed_one_needs_it_whole(
    server, cache, use_catalog, model_folder
):
    """Reuse checks the unpacked files only (the tarball is not hashed again); unpacking again verifies it."""
    server.files["models/elmo.tar.gz"] = MODEL_TARBALL
    use_catalog([{"name": "test/tar", "urls": {"archive": server.url("models/elmo.tar.gz")}}])
    path = resolve_model_source("test/tar", progress=False)
    archive = download.local_files({"archive": server.url("models/elmo.tar.gz")})["archive"]
    archive.write_bytes(MODEL_TARBALL[:-10])  # the kept tarball damaged: not read while the folder is intact
    assert resolve_model_source("test/tar", progress=False) == path
    (path / "options.json").write_bytes(b"{}")  # now the folder must be unpacked again: from a verified tarball
    with pytest.raises(DownloadError, match="changed since it was downloaded"):
        resolve_model_source("test/tar", progress=False)
    archive.unlink()
    (archive.parent / (archive.name + ".sha256")).unlink()
    assert resolve_model_source("test/tar", progress=False) == path  # fetched again, unpacked again
    assert load_model(path).sha256 == load_model(model_folder).sha256


def test_a_file_changed_in_the_unpacked_folder_is_said_and_unpacked_again(cache, tmp_path, model_folder, capfd):
    """The cache holds verified bytes only: each unpacked file's SHA-256 is checked at reuse, as a download's is."""
    local = tmp_path / "m.tar.gz"
    local.write_bytes(MODEL_TARBALL)
    path = resolve_model_source(local)
    reference = load_model(model_folder).sha256
    record = cache / UNPACKED_FOLDER / f"{sha256(MODEL_TARBALL)}.files.json"
    assert sorted(json.loads(record.read_text())) == ["model/lm_weights.hdf5", "model/options.json"]
    capfd.readouterr()
    for damage in (
        lambda: (path / "options.json").write_bytes((path / "options.json").read_bytes().replace(b"2", b"3")),
        lambda: (path / "lm_weights.hdf5").unlink(),
        lambda: (path / "extra.hdf5").write_bytes(b"a second weight file"),
        lambda: record.unlink(),
    ):
        damage()
        assert resolve_model_source(local) == path
        assert sorted(p.name for p in path.iterdir()) == ["lm_weights.hdf5", "options.json"]
        assert load_model(path).sha256 == reference
        said = capfd.readouterr().err
        assert f"unpacking {local} again" in said and str(cache / UNPACKED_FOLDER) in said, said
    resolve_model_source(local)
    assert capfd.readouterr().err == ""  # as unpacked: reused, nothing said


def test_an_unpack_killed_half_way_is_never_taken_as_done_and_a_rerun_finishes_it(cache, tmp_path, model_folder):
    local = tmp_path / "m.tar.gz"
    local.write_bytes(MODEL_TARBALL)
    target = cache / UNPACKED_FOLDER / sha256(MODEL_TARBALL)
    run_killed(lambda: resolve_model_source(local), at_call(tarfile.TarFile, "extract", n=3))  # after 2 members
    assert not target.exists()
    (half,) = (cache / UNPACKED_FOLDER).glob(f"{target.name}.tmp*")
    assert (half / "model").is_dir()
    assert load_model(local).sha256 == load_model(model_folder).sha256
    assert target.is_dir() and not half.exists()


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"../evil": b"x"}, r"member '\.\./evil' has a name outside the folder"),
        ({"m/../../evil": b"x"}, r"member 'm/\.\./\.\./evil' has a name outside the folder"),
        ({"/tmp/evil": b"x"}, r"member '/tmp/evil' has an absolute name"),
        ({"m/link": ("symlink", "../../evil")}, r"member 'm/link' has a link target outside the folder"),
        ({"m/link": ("symlink", "/etc/passwd")}, r"member 'm/link' has an absolute link target"),
        ({"m/hard": ("hardlink", "../evil")}, r"member 'm/hard' has a link target outside the folder"),
        ({"m/link": ("symlink", "."), "m/link/x": b"x"}, r"member 'm/link/x' lies behind a link"),
        ({"m/a": b"x", "m/a ": b"y", "m/./a": b"z"}, r"member 'm/\./a' comes twice"),
    ],
    ids=["dotdot", "climbing", "absolute", "symlink-out", "symlink-absolute", "hardlink-out", "behind-link", "twice"],
)
def test_a_member_out_of_the_folder_is_refused_naming_the_tarball(cache, tmp_path, members, why):
    local = tmp_path / "work" / "bad.tar.gz"
    local.parent.mkdir()
    local.write_bytes(tarball(members))
    with pytest.raises(TarballError, match=rf"{local}: {why}"):
        resolve_model_source(local)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "work" / "evil").exists()
    assert [p.name for p in (cache / UNPACKED_FOLDER).iterdir() if not p.name.startswith(".")] == []


def test_a_link_inside_the_folder_is_kept(cache, tmp_path):
    local = tmp_path / "links.tar"
    local.write_bytes(tarball({"m/a.txt": b"a", "m/b.txt": ("symlink", "a.txt"), "m/c.txt": ("hardlink", "m/a.txt")}))
    folder = resolve_model_source(local)
    assert (folder / "b.txt").read_bytes() == (folder / "c.txt").read_bytes() == b"a"
    assert os.path.realpath(folder / "b.txt") == str((folder / "a.txt").resolve())


def test_a_cut_or_damaged_tarball_is_refused_naming_the_file(server, cache, tmp_path):
    for name, data in [
        ("cut.tar.gz", MODEL_TARBALL[: len(MODEL_TARBALL) // 2]),
        ("crc.tar.gz", MODEL_TARBALL[:-8] + bytes(8)),  # the gzip trailer's CRC and length wrong
        ("cut.tar", tarball({"m/a": b"a" * 600, "m/b": b"b"}, mode="w")[:1536]),  # ends at a header, no end block
        ("notatar.tar", b"just some bytes" * 100),
    ]:
        local = tmp_path / name
        local.write_bytes(data)
        with pytest.raises(TarballError, match=rf"{local}: "):
            resolve_model_source(local)
        assert tar_problem(local) is not None
    server.files["cut.tar.gz"] = MODEL_TARBALL[: len(MODEL_TARBALL) // 2]
    server.no_length.add("cut.tar.gz")  # a body that ends early with no length to tell: read, and refused
    with pytest.raises(DownloadError, match=r"cut\.tar\.gz: the body, of no stated length, is not a readable tar"):
        resolve_model_source(server.url("cut.tar.gz"), progress=False)
    server.files["evil.tgz"] = tarball({"../evil": b"x"})
    with pytest.raises(DownloadError, match=r"evil\.tgz: the file sent is not a readable tar archive \(member"):
        resolve_model_source(server.url("evil.tgz"), progress=False)
    assert [p.name for p in (cache / UNPACKED_FOLDER).iterdir() if not p.name.startswith(".")] == []


def test_too_many_members_are_refused(cache, tmp_path, monkeypatch):
    from spacy_elmo.hub import unpack

    monkeypatch.setattr(unpack, "MAX_MEMBERS", 3)
    local = tmp_path / "many.tar"
    local.write_bytes(tarball({f"m/{i}": b"x" for i in range(4)}, mode="w"))
    with pytest.raises(TarballError, match=r"many\.tar: more than 3 members"):
        unpacked(local, cache)
    monkeypatch.setattr(unpack, "MAX_TOTAL_BYTES", 100)
    local.write_bytes(tarball({"m/big": b"x" * 101}, mode="w"))
    with pytest.raises(TarballError, match=r"many\.tar: its members hold more than"):
        unpacked(local, cache)
    assert MAX_MEMBERS >= 1000


def test_an_alignment_matrix_is_fetched_beside_the_weights_and_the_folder_loads(
    server, cache, use_catalog, model_folder
):
    matrix = (FIXTURES / "alignment" / "numpy_legacy.pth").read_bytes()
    for name, path in MODEL_FILES.items():
        server.files[f"ml/{name}"] = path.read_bytes()
    server.files["ml/en_best_mapping.pth"] = matrix
    urls = {
        "options": server.url("ml/options.json"),
        "weights": server.url("ml/lm_weights.hdf5"),
        "alignment": server.url("ml/en_best_mapping.pth"),
        "a-role-not-known-yet": server.url("ml/whatever.bin"),  # left alone: a newer catalog still loads
    }
    use_catalog([{"name": "test/aligned", "urls": urls}])
    folder = resolve_model_source("test/aligned", progress=False)
    assert (folder / "en_best_mapping.pth").read_bytes() == matrix
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "en_best_mapping.pth",
        "en_best_mapping.pth.sha256",
        "lm_weights.hdf5",
        "lm_weights.hdf5.sha256",
        "options.json",
        "options.json.sha256",
    ]
    assert load_model("test/aligned").sha256 == load_model(model_folder).sha256
    expected = numpy.frombuffer((FIXTURES / "alignment" / "matrix.f32le").read_bytes(), "<f4").reshape(8, 8)
    assert numpy.array_equal(read_alignment(folder / "en_best_mapping.pth")[0], expected)
    assert server.hits("ml/whatever.bin") == []
    assert download.is_cached(download.load_catalog()["test/aligned"])
    server.files["ml2/options.json"] = server.files["ml/options.json"]
    server.files["ml2/lm_weights.hdf5"] = server.files["ml/lm_weights.hdf5"]
    server.files["ml2/en_best_mapping.pth"] = matrix[:300]  # a matrix cut short is refused like any file
    server.no_length.add("ml2/en_best_mapping.pth")
    use_catalog([{"name": "test/cut", "urls": {**{r: u.replace("/ml/", "/ml2/") for r, u in urls.items()}}}])
    with pytest.raises(DownloadError, match=r"en_best_mapping\.pth: the body, of no stated length, is not a readable"):
        resolve_model_source("test/cut", progress=False)


def test_a_companion_named_as_a_weight_file_is_refused(cache):
    urls = {"options": "https://h/o.json", "weights": "https://h/w.hdf5", "alignment": "https://h/other/w.hdf5"}
    with pytest.raises(DownloadError, match=r"https://h/other/w\.hdf5: the alignment file of a model cannot be"):
        download.local_files(urls)
