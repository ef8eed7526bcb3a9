"""The package's layers: no module imports from a layer above its own.

The layers and the module map are written once, in CONTRIBUTING.md ("Layers", "Where things live"); this
test reads them from there. Every module under spacy_elmo/ is parsed with `ast`; every import of a
spacy_elmo module (relative ones resolved, imports inside functions included) is an edge. A module may
import from its own layer and the layers below it. A subpackage listed as one entry (bilm, io, layers,
pretrain, embed, cli) is one unit: inside it anything goes.

Also: every module imports without h5py (test_importing_the_package_does_not_need_h5py).
"""

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

PACKAGE_DIR = Path(__file__).parent.parent / "spacy_elmo"
PACKAGE = "spacy_elmo"

CONTRIBUTING = PACKAGE_DIR.parent / "CONTRIBUTING.md"


def _section(title: str) -> str:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def read_layers() -> list[list[str]]:
    """CONTRIBUTING.md's numbered layer list, lowest first: "1. `about`, `chars`" -> [["about", "chars"], ...]."""
    layers = []
    for line in _section("Layers").splitlines():
        match = re.match(r"^\d+\. (.*)$", line)
        if match:
            layers.append(re.findall(r"`([^`]+)`", match.group(1)))
    return layers


# Names are relative to spacy_elmo; "__init__" is spacy_elmo/__init__.py itself, a subpackage's name
# covers everything inside it.
LAYERS: list[list[str]] = read_layers()


def _module_names() -> dict[str, Path]:
    """{"spacy_elmo.bilm.lstm": path, "spacy_elmo.bilm": path of its __init__.py, ...}"""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _module_names()


def layer_entry(module: str) -> Optional[str]:
    """The LAYERS entry covering a module ("spacy_elmo.bilm.lstm" -> "bilm"), the longest that matches."""
    if module == PACKAGE:
        relative = "__init__"
    else:
        relative = module[len(PACKAGE) + 1 :]
    best = None
    for entry in (e for layer in LAYERS for e in layer):
        if relative == entry or relative.startswith(entry + "."):
            if best is None or len(entry) > len(best):
                best = entry
    return best


def layer_index(module: str) -> int:
    entry = layer_entry(module)
    assert entry is not None, module
    return next(i for i, layer in enumerate(LAYERS) if entry in layer)


def _package_of(module: str) -> str:
    """The package a module's relative imports start from."""
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


@functools.cache
def imports_of(module: str) -> frozenset[str]:
    """The spacy_elmo modules a module imports, relative imports resolved."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # `from .pretrain import corpus` imports the module spacy_elmo.pretrain.corpus
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                found.add(target)
    found.discard(module)
    return frozenset(found)


def edges() -> list[tuple[str, str]]:
    """(importer, imported) for every import of a spacy_elmo module that exists."""
    return sorted((module, target) for module in MODULES for target in imports_of(module) if target in MODULES)


def layer_violations() -> set[tuple[str, str]]:
    # modules without a layer are reported by test_every_module_has_a_layer
    layered = [(a, b) for a, b in edges() if layer_entry(a) is not None and layer_entry(b) is not None]
    return {(a, b) for a, b in layered if layer_index(b) > layer_index(a)}


def _where(module: str) -> str:
    entry = layer_entry(module)
    return f"layer {layer_index(module)}: {entry}" if entry is not None else "no layer"


def _describe(violations) -> str:
    return "\n".join(f"  {a} ({_where(a)}) imports {b} ({_where(b)})" for a, b in sorted(violations))


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if layer_entry(m) is None)
    assert not missing, (
        f'modules without a layer: {missing}. Add each to the layer list in CONTRIBUTING.md ("Layers"), in '
        "the lowest layer whose modules it may import from, and to its module map"
    )


def test_every_imported_module_exists():
    unknown = sorted((m, t) for m in MODULES for t in imports_of(m) if t not in MODULES)
    assert not unknown, f"imports of spacy_elmo modules that do not exist: {unknown}"


def test_every_layer_entry_exists():
    covered = {layer_entry(m) for m in MODULES}
    stale = [e for layer in LAYERS for e in layer if e not in covered]
    assert not stale, (
        f"CONTRIBUTING.md's layers list {stale}, which no module under spacy_elmo/ matches: rename or remove them"
    )


def test_layer_list_has_no_duplicates():
    entries = [e for layer in LAYERS for e in layer]
    assert entries and len(entries) == len(set(entries))


def test_every_layer_entry_is_in_the_module_map():
    table = _section("Where things live")
    unmapped = [e for layer in LAYERS for e in layer if f"spacy_elmo/{e}" not in table and f"`{e}.py`" not in table]
    assert not unmapped, f"CONTRIBUTING.md's module map does not describe {unmapped}"


def test_no_layer_violations():
    violations = layer_violations()
    assert not violations, f"imports from a layer above (see CONTRIBUTING.md):\n{_describe(violations)}"


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


def test_importing_the_package_does_not_need_h5py():
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_H5PY],
        cwd=str(PACKAGE_DIR.parent),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", (
        f"importing spacy_elmo's modules needs h5py (import it where a file is read or written):\n"
        f"{result.stderr[-3000:]}"
    )
