"""A package a feature imports only when used (an extra's, or torch and pooch where the torch-free serving
install left them out) is named before any work starts, in one line with the `pip install` line that works
without PyPI: the packages with pyproject.toml's ranges, and the extra as a clone or the built wheel installs
it. The ranges come from `spacy_elmo.errors`' copy of pyproject.toml, checked against it here. The commands are
also run as `python -m spacy_elmo` with the package hidden, as where it is not installed: one `error:` line,
exit status 1, no traceback, nothing written."""

import json
import os
import re
import subprocess
import sys

import pytest
import spacy
from typer.testing import CliRunner

from fixture_paths import ELMO_FIXTURE, ROOT
from packaging_support import load_pyproject
from spacy_elmo.about import __version__
from spacy_elmo.cli import elmo_cli
from spacy_elmo.embed import EmbedSettings, embed_file
from spacy_elmo.errors import (
    DEPENDENCIES,
    EXTRAS,
    MissingPackageError,
    add_requirement,
    missing_message,
    require,
    requirement,
    requirement_name,
    requirements,
)

PYPROJECT = load_pyproject()
README = ROOT / "README.md"
# an install line for a package that is not on PyPI: `pip install spacy-elmo[onnx]`, 'spacy-elmo[spark]', ...
PYPI_INSTALL = re.compile(r"spacy-elmo\[|pip install ['\"]?spacy-elmo\b")


def pyproject() -> dict:
    if PYPROJECT is None:  # Python < 3.11 without tomli
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+) or tomli")
    return PYPROJECT["project"]


def test_the_copy_of_the_requirements_is_pyprojects():
    project = pyproject()
    assert list(DEPENDENCIES) == project["dependencies"], "spacy_elmo/errors.py DEPENDENCIES: copy pyproject.toml's"
    for extra, listed in EXTRAS.items():
        assert list(listed) == project["optional-dependencies"][extra], f"spacy_elmo/errors.py EXTRAS[{extra!r}]"


def test_a_requirement_is_found_by_its_module_with_its_range():
    assert requirements("onnx") == EXTRAS["onnx"] and requirements() == DEPENDENCIES
    assert requirement("onnxruntime", "onnx") == "onnxruntime>=1.20,<2"
    assert requirement("ray", "ray") == "ray[data]>=2.10"
    assert requirement("torch") == "torch>=2.13"  # a dependency, found without an extra
    assert requirement("nowhere") == "nowhere"  # not listed: the bare name still installs it


def test_a_hint_names_the_packages_their_ranges_and_the_extra_as_installable_here():
    hint = missing_message("export", ["onnx", "onnxscript"], extra="onnx")
    assert hint.startswith(
        'export needs onnx and onnxscript, which are not installed: pip install "onnx>=1.17,<2" "onnxscript>=0.5,<1"'
    )
    assert 'pip install ".[onnx]" in a clone' in hint
    assert f'pip install "dist/spacy_elmo-{__version__}-py3-none-any.whl[onnx]"' in hint
    torch = missing_message("verify", ["torch"])
    assert 'pip install "torch>=2.13"' in torch and "pip install --no-deps" in torch and "whl/cpu" in torch
    for line in (hint, torch):
        assert "\n" not in line and not PYPI_INSTALL.search(line)


def test_require_names_only_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as Python's import system sees a blocked module
    require("export", "onnx", extra="onnx")  # installed: nothing said
    with pytest.raises(
        MissingPackageError, match=r'^export needs onnxscript, which is not installed: pip install "o'
    ) as err:
        require("export", "onnx", "onnxscript", extra="onnx")
    assert isinstance(err.value, ImportError) and err.value.name == "onnxscript"
    assert '"onnx>=' not in str(err.value)


def test_no_message_or_readme_line_installs_from_pypi():
    sources = [README, *sorted((ROOT / "spacy_elmo").rglob("*.py"))]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PYPI_INSTALL.search(line)
    ]
    assert not found, "spacy-elmo is not on PyPI; say what works from a clone or a built wheel:\n" + "\n".join(found)


def test_the_readme_names_the_extras_and_an_example_as_the_hints_write_it():
    text = README.read_text(encoding="utf-8")
    for extra in EXTRAS:
        assert f"`[{extra}]`" in text, f"README.md does not name the [{extra}] extra"
    assert f'`pip install "{requirement("pyarrow", "parquet")}"`' in text
    assert '`pip install "dist/spacy_elmo-VERSION-py3-none-any.whl[onnx]"`' in text


def test_add_requirement_lists_a_package_once():
    listed = ["spacy-elmo>=0.1.0,<0.2.0"]
    add_requirement(listed, "onnxruntime", extra="onnx")
    add_requirement(listed, "onnxruntime", extra="onnx")
    assert listed == ["spacy-elmo>=0.1.0,<0.2.0", "onnxruntime>=1.20,<2"]
    mine = ["onnxruntime==1.22.0"]
    add_requirement(mine, "onnxruntime", extra="onnx")
    assert mine == ["onnxruntime==1.22.0"]  # the pipeline's own pin is kept


def test_an_onnxruntime_pipeline_requires_onnxruntime_when_packaged():
    """`spacy package` makes meta.json's requirements the package's: `pip install` of it brings ONNX Runtime."""
    served = spacy.blank("en")
    served.add_pipe("elmo", config={"model": {"path": "model.onnx", "runtime": "onnxruntime"}})  # read at init
    assert requirement("onnxruntime", "onnx") in served.meta.get("requirements", [])
    trained = spacy.blank("en")
    trained.add_pipe("elmo")
    assert all(requirement_name(r) != "onnxruntime" for r in trained.meta.get("requirements", []))


def test_a_served_pipeline_keeps_requiring_onnxruntime_when_saved_and_loaded(fixture_graph_file, tmp_path):
    """spaCy reads meta.json before the pipes, replacing the list with the saved one: the pipe lists it again, so
    saving it again (the README's recipe) gives `spacy package` a meta.json that requires ONNX Runtime."""
    from spacy.cli.package import get_meta

    needed = requirement("onnxruntime", "onnx")
    served = spacy.blank("en")
    served.add_pipe("elmo", config={"model": {"path": str(fixture_graph_file.path), "runtime": "onnxruntime"}})
    served.initialize()
    served.to_disk(tmp_path / "served")
    meta_file = tmp_path / "served" / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    assert needed in meta["requirements"]
    meta["requirements"] = ["mine>=1"]  # a pipeline's own list, as saved before this release or edited
    meta_file.write_text(json.dumps(meta), encoding="utf-8")
    loaded = spacy.load(tmp_path / "served")
    assert loaded.meta["requirements"] == ["mine>=1", needed]
    loaded.to_disk(tmp_path / "again")  # `spacy package` lists what the saved meta.json does
    saved = json.loads((tmp_path / "again" / "meta.json").read_text(encoding="utf-8"))
    assert get_meta(tmp_path / "again", saved)["requirements"][:2] == ["mine>=1", needed]  # then spacy-elmo's


def test_embed_without_pyarrow_is_refused_before_anything_is_read_or_written(tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    settings = EmbedSettings(str(ELMO_FIXTURE))
    with pytest.raises(MissingPackageError, match=r'^--format parquet needs pyarrow.*pip install "pyarrow>=15"'):
        embed_file(tmp_path / "in.txt", tmp_path / "out.parquet", settings, output_format="parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_the_exporter_names_its_packages_before_exporting(reference_bilm, monkeypatch):
    from spacy_elmo.onnx.export import export_bytes

    monkeypatch.setitem(sys.modules, "onnxscript", None)
    with pytest.raises(MissingPackageError, match=r'^ONNX export needs onnxscript.*pip install "onnxscript>=0\.5,<1"'):
        export_bytes(reference_bilm)


def test_a_command_says_a_missing_dependency_in_one_line(monkeypatch):
    monkeypatch.delenv("SPACY_ELMO_CACHE", raising=False)  # the user cache folder: pooch finds it
    monkeypatch.setitem(sys.modules, "pooch", None)
    done = CliRunner().invoke(elmo_cli, ["models"])
    assert done.exit_code == 1 and done.stdout == "", done.output
    assert done.stderr.splitlines() == [f"error: {missing_message('models', ['pooch'])}"]


def test_other_import_errors_are_not_taken_for_a_missing_package(monkeypatch):
    import spacy_elmo.cli.models as models

    for name in ("no_such_package", "numpy.no_such_module"):  # unknown; known but installed

        def broken(lang, name=name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        monkeypatch.setattr(models, "entries_for", broken)
        done = CliRunner().invoke(elmo_cli, ["models", "--cache", "."])
        assert isinstance(done.exception, ModuleNotFoundError) and done.exception.name == name


# as where these packages are not installed: importing one fails as Python's import system fails it; then
# the command line as `python -m spacy_elmo` runs it
HIDE_AND_RUN = """
import runpy, sys
hidden = set(sys.argv.pop(1).split(","))

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)

sys.meta_path.insert(0, Hide())
runpy.run_module("spacy_elmo", run_name="__main__", alter_sys=True)
"""
MODEL = str(ELMO_FIXTURE)
CASES = {
    "embed-parquet": (["pyarrow"], "parquet", ["embed", MODEL, "in.txt", "out.parquet"]),
    "export": (["onnx", "onnxscript"], "onnx", ["export", MODEL, "model.onnx"]),
    "embed-onnxruntime": (
        ["onnxruntime"],
        "onnx",
        ["embed", "model.onnx", "in.txt", "out.hdf5", "--runtime", "onnxruntime"],
    ),
    "models": (["pooch"], None, ["models"]),
    "verify": (["torch"], None, ["verify", MODEL]),
}


@pytest.mark.slow  # starts a Python process a case
@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", CASES)
def test_a_command_without_its_package_says_so_in_one_line_before_any_work(case, tmp_path):
    modules, extra, args = CASES[case]
    (tmp_path / "in.txt").write_text("The first line .\nA second .\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SPACY_ELMO_CACHE"}  # models: the user cache folder
    done = subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN, ",".join(modules), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=150,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    specs = " ".join(f'"{requirement(module, extra)}"' for module in modules)
    assert line.startswith("error: ") and f"needs {' and '.join(modules)}, which " in line, line
    assert f"pip install {specs}" in line, line
    if extra is not None:
        assert f'pip install ".[{extra}]"' in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # no output, no OUTPUT.partial/
