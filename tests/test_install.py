"""The README's install recipes as written, offline: a wheel built from the tree, a fresh virtualenv that
sees only the serving dependencies (spaCy, ONNX Runtime, h5py and what they require, never torch), the
wheel installed there with `--no-deps`, and a `spacy package` pipeline installed beside it. There the
package loads a pipeline saved with the onnxruntime runtime to the layers this process computes, and
`embed model.onnx ... --runtime onnxruntime` runs; torch cannot be imported.

No command touches the network: every pip call gets `--no-index`, the wheels are built without build
isolation, and `pip install spacy "onnxruntime>=1.20,<2" h5py` is emulated by a `.pth` file pointing at a
directory of links to those distributions (and their requirements) as installed in this environment.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import h5py
import numpy
import pytest
import spacy

from fixture_paths import ELMO_FIXTURE, ROOT
from packaging_support import load_pyproject

pytestmark = pytest.mark.slow  # builds two wheels and a virtualenv, starts processes

README = ROOT / "README.md"
# the README's lines, word for word; the test runs each one (pip offline, against the fresh virtualenv)
BUILD_WHEEL = "pip wheel --no-deps . -w dist/"
SERVING_DEPENDENCIES = 'pip install spacy "onnxruntime>=1.20,<2" h5py'
INSTALL_WHEEL = "pip install --no-deps dist/spacy_elmo-*.whl"
MAKE_PACKAGES = "mkdir -p packages"
PACKAGE = "python -m spacy package serving packages/ --name elmo_serving --version 1.0.0 --build wheel"
INSTALL_PIPELINE_WITH_TORCH = (
    "pip install --find-links dist/ packages/en_elmo_serving-1.0.0/dist/en_elmo_serving-1.0.0-py3-none-any.whl"
)
INSTALL_PIPELINE_SERVING = (
    "pip install --no-deps packages/en_elmo_serving-1.0.0/dist/en_elmo_serving-1.0.0-py3-none-any.whl"
)
EMBED = "python -m spacy_elmo embed model.onnx corpus.txt out.hdf5 --runtime onnxruntime"
README_LINES = [
    BUILD_WHEEL,
    SERVING_DEPENDENCIES,
    INSTALL_WHEEL,
    MAKE_PACKAGES,
    PACKAGE,
    INSTALL_PIPELINE_WITH_TORCH,
    INSTALL_PIPELINE_SERVING,
    EMBED,
]
TIMEOUT = 300
OFFLINE = ["--no-index", "--no-build-isolation", "--disable-pip-version-check", "-q"]
TEXTS = ["The bank raised its rates .", "We sat on the river bank .", "A"]

SERVE = """
import importlib.util, json, sys
import numpy, spacy
import spacy_elmo
nlp = spacy.load("en_elmo_serving")
numpy.savez(sys.argv[2], *[doc._.elmo_layers for doc in nlp.pipe(json.loads(sys.argv[1]))])
print(json.dumps({
    "spacy_elmo": spacy_elmo.__file__,
    "torch_importable": importlib.util.find_spec("torch") is not None,
    "torch_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "torch"),
}))
"""


def readme_command_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines += [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return lines


def test_the_readme_holds_the_lines_this_test_runs():
    lines = readme_command_lines()
    missing = [line for line in README_LINES if line not in lines]
    assert not missing, f"README.md lacks these install lines (as whole commands): {missing}"


def run(words: list[str], cwd: Path, env=None) -> str:
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 0, f"{shlex.join(words)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def pip(command: str, cwd: Path, python: Path = None, env=None) -> str:
    """A README pip line, offline; with `python`, run against that interpreter's environment."""
    words = shlex.split(command)
    assert words[0] == "pip"
    target = ["--python", str(python)] if python else []
    expanded = []
    for word in words[2:]:
        matches = sorted(str(path.relative_to(cwd)) for path in cwd.glob(word)) if "*" in word else [word]
        assert len(matches) == 1, f"{word}: {matches}"
        expanded += matches
    return run([sys.executable, "-m", "pip", *target, words[1], *OFFLINE, *expanded], cwd, env)


def requirement_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements need, as installed here (markers of this interpreter, no
    extras); each installed version must satisfy the requirement."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        try:
            installed = distribution(name)
        except PackageNotFoundError:
            pytest.fail(f"{requirement} is not installed here, so the serving environment cannot be emulated")
        assert requirement.specifier.contains(installed.version, prereleases=True), (requirement, installed.version)
        if name in found:
            continue
        found.add(name)
        for spec in installed.requires or []:
            needed = Requirement(spec)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                todo.append(needed)
    return found


def pipeline_requirement(wheel: Path, name: str) -> str:
    """The wheel's requirement of `name` (Requires-Dist), lower bounds first as pyproject.toml writes them."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = Parser().parsestr(archive.read(metadata).decode("utf-8")).get_all("Requires-Dist") or []
    found = [Requirement(r) for r in requires if Requirement(r).name == name]
    assert len(found) == 1, f"{wheel.name} requires {requires}"
    bounds = sorted(found[0].specifier, key=lambda s: (s.operator.startswith("<"), str(s)))
    return name + ",".join(str(s) for s in bounds)


def link_distributions(names: set[str], directory: Path) -> Path:
    """A directory of links to the installed files of these distributions (their top-level entries)."""
    directory.mkdir()
    for name in names:
        installed = distribution(name)
        site = Path(installed.locate_file(""))
        for top in {Path(str(file)).parts[0] for file in installed.files or []} - {".."}:
            if not (directory / top).exists() and (site / top).exists():
                (directory / top).symlink_to(site / top)
    return directory


def test_a_wheel_serves_in_a_fresh_virtualenv_without_torch(tmp_path, monkeypatch, fixture_graph_file):
    # a clone: the files a build reads
    work = tmp_path / "clone"
    work.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, work / path.name)
    shutil.copytree(ROOT / "spacy_elmo", work / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    pip(BUILD_WHEEL, work)
    [wheel] = (work / "dist").glob("spacy_elmo-*.whl")

    # where torch is: a trained pipeline saved for serving (the README's block), and a graph for embed
    trained = spacy.blank("en")
    trained.add_pipe("sentencizer")
    trained.add_pipe("elmo", config={"model": {"path": str(ELMO_FIXTURE)}})
    trained.initialize()
    (work / "training").mkdir()
    trained.to_disk(work / "training" / "model-best")
    monkeypatch.chdir(work)
    serving_block = next(
        b for b in re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S) if "serving" in b
    )
    exec(compile("import spacy\n" + serving_block, "README.md (saving for serving)", "exec"), {})
    served = spacy.load(work / "serving")
    assert served.get_pipe("elmo").runtime == "onnxruntime"
    expected = [doc._.elmo_layers for doc in served.pipe(TEXTS)]
    shutil.copyfile(fixture_graph_file.path, work / "model.onnx")  # the run's export of the fixture
    (work / "corpus.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")

    assert shlex.split(MAKE_PACKAGES) == ["mkdir", "-p", "packages"]
    (work / "packages").mkdir()
    run([sys.executable, *shlex.split(PACKAGE)[1:]], work)
    # the package requires what it serves with, as pyproject.toml's [onnx] extra states it
    assert pipeline_requirement(work / shlex.split(INSTALL_PIPELINE_SERVING)[-1], "onnxruntime") == next(
        r for r in load_pyproject()["project"]["optional-dependencies"]["onnx"] if r.startswith("onnxruntime")
    )

    # the fresh virtualenv, seeing the serving dependencies only
    venv = tmp_path / "serving-venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path).strip())
    serving = requirement_closure(shlex.split(SERVING_DEPENDENCIES)[2:])
    assert not {"torch", "spacy-elmo"} & serving
    (site / "serving-dependencies.pth").write_text(
        f"{link_distributions(serving, tmp_path / 'serving-dependencies')}\n", encoding="utf-8"
    )

    # where torch is, pip finds the pipeline's spacy-elmo requirement in dist/ (the package's own
    # requirements, torch among them, made visible)
    own = load_pyproject()["project"]["dependencies"]
    with_torch = link_distributions(requirement_closure(own) - serving, tmp_path / "torch-dependencies")
    env = {**os.environ, "PYTHONPATH": str(with_torch)}
    dry_run = INSTALL_PIPELINE_WITH_TORCH.replace("install", "install --dry-run --report -", 1)
    report = json.loads(pip(dry_run, work, python, env))
    would = {item["metadata"]["name"]: item["download_info"]["url"] for item in report["install"]}
    assert set(would) == {"en_elmo_serving", "spacy-elmo"}, would
    assert would["spacy-elmo"] == wheel.as_uri(), would  # found in dist/

    pip(INSTALL_WHEEL, work, python)
    pip(INSTALL_PIPELINE_SERVING, work, python)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    report = json.loads(
        run([str(python), "-I", "-c", SERVE, json.dumps(TEXTS), str(tmp_path / "l.npz")], tmp_path, env)
    )
    assert report["spacy_elmo"].startswith(str(site)), report  # the installed wheel, not the clone
    assert not report["torch_importable"] and not report["torch_loaded"], report
    with numpy.load(tmp_path / "l.npz") as got:
        for i, layers in enumerate(expected):
            assert numpy.array_equal(got[f"arr_{i}"], layers), TEXTS[i]

    run([str(python), "-I", *shlex.split(EMBED)[1:]], work, env)
    with h5py.File(work / "out.hdf5", "r") as output:
        assert sorted(output, key=int) == [str(i) for i in range(len(TEXTS))]
        for i, layers in enumerate(expected):
            numpy.testing.assert_allclose(output[str(i)][...], layers, rtol=0, atol=1e-6)
