"""The wheel built from this tree ships the model, the configs, py.typed and the entry points.

The wheel is built offline (`pip wheel --no-deps --no-build-isolation --no-index`) with the setuptools
of the running environment, from a copy of the tree (setuptools writes build/ and *.egg-info next to
pyproject.toml; a stale egg-info in the working tree would shadow the installed metadata). The build
takes about 2 s; the whole file about 3 s.
"""

import ast
import configparser
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from packaging_support import ROOT, declared_entry_points, load_pyproject

pytestmark = pytest.mark.slow  # builds a wheel

PACKAGE = ROOT / "spacy_elmo"
SHIPPED_MODEL_FILES = ["model.msgpack", "options.json", "README.md"]
BUILD_TIMEOUT = 300
# imported only where an optional extra is installed: {import name: the extras providing it}
OPTIONAL_IMPORTS = {
    "cupy": ("cuda12x", "cuda13x"),
    "onnxruntime": ("onnx",),
    "pyarrow": ("parquet", "spark", "ray"),
    "pyspark": ("spark",),
    "ray": ("ray",),
}

PYPROJECT = load_pyproject()
if PYPROJECT is None:  # Python < 3.11 without tomli
    pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+) or tomli", allow_module_level=True)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _check_build_requirements() -> None:
    """--no-build-isolation builds with this environment's setuptools: skip if it is too old."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - packaging comes with spaCy
        return
    for spec in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(spec)
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            pytest.skip(f"building needs {spec} in this environment (pip install '{spec}')")
        if not requirement.specifier.contains(installed, prereleases=True):
            pytest.skip(f"building needs {spec}, this environment has {installed} (pip install -U '{spec}')")


def _copy_tree(dest: Path) -> Path:
    """The files a build reads: the top-level files and the package, __pycache__ included (a dirty tree)."""
    dest.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, dest / path.name)
    shutil.copytree(PACKAGE, dest / PACKAGE.name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    _check_build_requirements()
    tmp = tmp_path_factory.mktemp("wheel")
    source = _copy_tree(tmp / "src")
    out = tmp / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    command += ["--disable-pip-version-check", "-q", "-w", str(out), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert result.returncode == 0, f"building the wheel failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    wheels = list(out.glob("spacy_elmo-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as archive:
        yield archive


@pytest.fixture(scope="module")
def names(wheel) -> set[str]:
    return set(wheel.namelist())


def _dist_info_file(wheel: zipfile.ZipFile, name: str) -> str:
    matches = [n for n in wheel.namelist() if re.fullmatch(r"spacy_elmo-[^/]+\.dist-info/" + re.escape(name), n)]
    assert len(matches) == 1, f"{name} in the wheel's .dist-info: {matches}"
    return wheel.read(matches[0]).decode("utf-8")


def _about_version() -> str:
    tree = ast.parse((PACKAGE / "about.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("spacy_elmo/about.py defines no __version__")


@pytest.mark.parametrize("filename", SHIPPED_MODEL_FILES)
def test_wheel_ships_the_model(wheel, names, filename):
    path = f"spacy_elmo/models/en_elmo_small/{filename}"
    assert path in names
    assert wheel.getinfo(path).file_size == (PACKAGE / "models" / "en_elmo_small" / filename).stat().st_size


def test_wheel_ships_every_config(names):
    configs = sorted(p.name for p in (PACKAGE / "configs").glob("*.cfg"))
    assert configs, "no spacy_elmo/configs/*.cfg"
    missing = [c for c in configs if f"spacy_elmo/configs/{c}" not in names]
    assert not missing, f"configs missing from the wheel: {missing}"


def test_wheel_ships_py_typed(names):
    assert "spacy_elmo/py.typed" in names


def test_wheel_ships_every_module(names):
    modules = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    missing = [m for m in modules if m not in names]
    assert not missing, f"modules missing from the wheel: {missing}"


def test_wheel_has_no_junk(names):
    junk = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo")) or "/." in n]
    assert not junk


def test_wheel_entry_points_match_pyproject(wheel):
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # entry point names are case-sensitive
    parser.read_string(_dist_info_file(wheel, "entry_points.txt"))
    in_wheel: dict[str, dict[str, str]] = {group: dict(parser[group]) for group in parser.sections()}
    assert in_wheel == declared_entry_points(PYPROJECT)
    for group in ("spacy_factories", "spacy_architectures", "spacy_cli", "console_scripts"):
        assert in_wheel.get(group), f"no {group} entry points in the wheel"


def test_wheel_metadata(wheel):
    metadata = Parser().parsestr(_dist_info_file(wheel, "METADATA"))
    assert metadata["Name"] == "spacy-elmo"
    assert metadata["Version"] == _about_version(), "the version is single-sourced from spacy_elmo/about.py"
    assert metadata["Requires-Python"] == PYPROJECT["project"]["requires-python"]
    requires = metadata.get_all("Requires-Dist")
    torch = [r for r in requires if _requirement_name(r) == "torch"]
    assert torch and all("<" not in r and "==" not in r for r in torch), f"torch must not be capped: {torch}"
    extras = set(metadata.get_all("Provides-Extra"))
    assert {"cuda12x", "cuda13x", "test", "project", "dev"} <= extras
    assert metadata.get_payload().lstrip().startswith("# spacy-elmo"), "the README is the long description"


def _imported_top_level_names() -> dict[str, list[str]]:
    """{top-level module: [files]} for every absolute import in spacy_elmo/."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                found.setdefault(top, []).append(path.relative_to(ROOT).as_posix())
    return found


def test_every_third_party_import_is_declared():
    from importlib.metadata import packages_distributions

    declared = {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    distributions = packages_distributions()
    undeclared = {}
    for top, files in _imported_top_level_names().items():
        if top in sys.stdlib_module_names or top in ("spacy_elmo", "__future__") or top in OPTIONAL_IMPORTS:
            continue
        candidates = {name.lower().replace("_", "-") for name in distributions.get(top, [top])}
        if not candidates & declared:
            undeclared[top] = sorted(set(files))
    assert not undeclared, f"imported by spacy_elmo/ but not in pyproject.toml's dependencies: {undeclared}"
