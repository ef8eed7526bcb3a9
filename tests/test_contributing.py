"""CONTRIBUTING.md against the package: every top-level module and subpackage is given a layer in
pyproject.toml's import-linter contracts (which `bash run.sh lint` checks with `lint-imports`) and a row
in the module map; `import spacy_elmo` and every module import without h5py; no module is over 400 lines and
no area over the budget CONTRIBUTING.md gives it; no run of 6 lines repeats in the package."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from packaging_support import ROOT, load_pyproject

PACKAGE_DIR = ROOT / "spacy_elmo"


def layer_entries() -> list[str]:
    """The entries of the layers contract, e.g. "cli", "about", "__main__"."""
    pyproject = load_pyproject()
    if pyproject is None:  # Python < 3.11 without tomli
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+) or tomli")
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    return [name.strip() for layer in layers for name in re.split(r"[:|]", layer)]


def top_level_entries() -> set[str]:
    modules = {p.stem for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in PACKAGE_DIR.glob("*/__init__.py")}
    return modules | packages


def module_map() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("## Where things live")
    return text[start : text.index("\n## ", start + 1)]


def test_every_module_has_a_layer_and_every_layer_a_module() -> None:
    entries = layer_entries()
    assert len(entries) == len(set(entries)), "a module is in two layers"
    assert set(entries) == top_level_entries(), (
        "pyproject.toml's layers contract and spacy_elmo/ differ: give a new module its layer there (the lowest "
        "whose modules it may import from), remove a deleted one"
    )


def test_every_module_is_in_the_module_map() -> None:
    table = module_map()
    unmapped = sorted(e for e in top_level_entries() if f"spacy_elmo/{e}" not in table and f"`{e}.py`" not in table)
    assert not unmapped, f"CONTRIBUTING.md's module map does not describe {unmapped}"


# `import spacy_elmo` must not need h5py: only the bilm-tf HDF5 reader/writer and `embed` (HDF5 output) use
# it, and they import it when a file is read or written. The check blocks h5py rather than looking for it
# in sys.modules: thinc.compat imports h5py whenever it is installed, so `import spacy` alone loads it.
IMPORT_WITHOUT_H5PY = r"""
import importlib, pkgutil, sys
sys.modules["h5py"] = None  # any `import h5py` now raises ImportError
import spacy_elmo
for info in pkgutil.walk_packages(spacy_elmo.__path__, "spacy_elmo."):
    if info.name != "spacy_elmo.__main__":
        importlib.import_module(info.name)
print("ok")
"""


def test_importing_the_package_does_not_need_h5py() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_H5PY], cwd=str(ROOT), capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", (
        f"importing spacy_elmo's modules needs h5py (import it where a file is read or written):\n"
        f"{result.stderr[-3000:]}"
    )


def test_test_files_have_unique_basenames() -> None:
    """tests/ has no __init__.py (pytest's rootdir imports): two test files of one name cannot both be collected."""
    from collections import Counter

    names = Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]


MAX_MODULE_LINES = 400


def size_budgets() -> dict[str, int]:
    """CONTRIBUTING.md's size table: an area's first `spacy_elmo/...` path -> its budget in lines."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("## Size")
    rows = re.findall(
        r"^\| `(spacy_elmo/[^`]*)`[^|]*\| ([\d,]+) \|$", text[start : text.index("\n## ", start + 1)], re.M
    )
    return {area: int(lines.replace(",", "")) for area, lines in rows}


def area_of(module: Path) -> str:
    relative = module.relative_to(PACKAGE_DIR)
    return "spacy_elmo/*.py" if len(relative.parts) == 1 else f"spacy_elmo/{relative.parts[0]}/"


def test_no_module_is_over_400_lines_and_no_area_over_its_budget() -> None:
    budgets = size_budgets()
    sizes: dict[str, int] = {}
    long_modules = []
    for module in sorted(PACKAGE_DIR.rglob("*.py")):
        lines = len(module.read_text(encoding="utf-8").splitlines())
        sizes[area_of(module)] = sizes.get(area_of(module), 0) + lines
        if lines > MAX_MODULE_LINES:
            long_modules.append(f"{module.relative_to(ROOT)} ({lines})")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}; split one by concern"
    assert set(sizes) == set(budgets), (
        f"CONTRIBUTING.md's size table lists {sorted(budgets)}, the package has {sorted(sizes)}"
    )
    over = {area: f"{sizes[area]} > {budget}" for area, budget in budgets.items() if sizes[area] > budget}
    assert not over, f"areas over their budget in CONTRIBUTING.md's size table: {over}; cut, or raise it saying why"


REPEAT_LINES = 6  # the review's measure: no run of 6 lines repeats anywhere in spacy_elmo/
REPEAT_MIN_CHARS = 150  # runs of short lines (closing brackets, `else:`, `return None`) are not code worth sharing


def test_no_run_of_six_lines_repeats_in_the_package() -> None:
    """The third leg of the size bound, which `duplicates` (outside the repository) checks more finely: a
    repeated run of code is one implementation too many. Blank lines and comments are skipped."""
    where: dict[tuple[str, ...], list[str]] = {}
    for module in sorted(PACKAGE_DIR.rglob("*.py")):
        lines = [
            (number, text.strip())
            for number, text in enumerate(module.read_text(encoding="utf-8").splitlines(), 1)
            if text.strip() and not text.strip().startswith("#")
        ]
        for start in range(len(lines) - REPEAT_LINES + 1):
            run = tuple(text for _, text in lines[start : start + REPEAT_LINES])
            if sum(map(len, run)) >= REPEAT_MIN_CHARS:
                where.setdefault(run, []).append(f"{module.relative_to(ROOT)}:{lines[start][0]}")
    repeated = [places for places in where.values() if len(places) > 1]
    assert not repeated, f"runs of {REPEAT_LINES} lines repeated (share one implementation): {repeated[:5]}"
