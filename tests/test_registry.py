"""Every name the package registers resolves through spaCy's registries from the installed entry points.

The names come from pyproject.toml, so the tests fail when an entry point and the registry disagree:
an entry point whose target is missing or registers under another name, a registered architecture or
factory without an entry point, or an installed package whose entry points are older than pyproject.toml
(reinstall: `pip install -e .`). Each lookup runs in a fresh interpreter that has not imported
spacy_elmo, as a pipeline loaded by spaCy would (after `replace_listeners` no `elmo` pipe is left to
import the package).
"""

import functools
import importlib
import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Optional

import pytest

from packaging_support import ROOT, declared_entry_points, load_pyproject

DIST_NAME = "spacy-elmo"
# at least these (more may come)
CLI_SUBCOMMANDS = {"convert", "pretrain", "evaluate", "embed"}
TIMEOUT = 180

_pyproject = load_pyproject()
if _pyproject is None:  # Python < 3.11 without tomli
    pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+) or tomli", allow_module_level=True)
ENTRY_POINTS = declared_entry_points(_pyproject)
ARCHITECTURES = sorted(ENTRY_POINTS.get("spacy_architectures", {}))
FACTORIES = sorted(ENTRY_POINTS.get("spacy_factories", {}))
CLI_PLUGINS = sorted(ENTRY_POINTS.get("spacy_cli", {}))
SCRIPTS = sorted(ENTRY_POINTS.get("console_scripts", {}))


# every check resolves the entry points in a fresh interpreter, as spaCy does for a user
pytestmark = pytest.mark.slow


def _run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    # from outside the repository, so that the installed package is the one imported
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=str(ROOT.parent),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


# Looks every declared name up through spaCy's registries, in a fresh interpreter, entry points only.
RESOLVE = r"""
import json, sys
import spacy
from spacy.language import Language
from spacy.util import registry

names = json.loads(sys.argv[1])
out = {"imported_by_spacy": "spacy_elmo" in sys.modules, "architectures": {}, "factories": {}, "cli": {}}

def where(obj):
    return f"{obj.__module__}:{obj.__qualname__}"

for name in names["architectures"]:
    out["architectures"][name] = where(registry.architectures.get(name))
spacy.blank("en")  # a Language loads the spacy_factories entry points
for name in names["factories"]:
    meta = Language.get_factory_meta(name)
    out["factories"][name] = {
        "entry_point": where(registry._entry_point_factories.get(name)),
        "factory": where(registry.factories.get(name)),
        "meta_name": meta.factory,
    }
for name in names["cli"]:
    app = registry.cli.get(name)
    out["cli"][name] = {
        "commands": sorted(command.name for command in app.registered_commands),
        "app_name": app.info.name,
    }
from spacy.cli._util import app as spacy_app
out["spacy_cli_groups"] = sorted(group.name or group.typer_instance.info.name for group in spacy_app.registered_groups)
print(json.dumps(out))
"""

# What the package registers by itself (its decorators), without any entry point being loaded.
DECORATED = r"""
import json
import catalogue
import spacy_elmo
from spacy.util import registry

# registry.architectures.get_all() would load the entry points: read catalogue's table instead
architectures = sorted(
    key[-1] for key in catalogue.REGISTRY
    if key[:2] == ("spacy", "architectures") and key[-1].startswith("spacy-elmo.")
)
# the @Language.factory table (spacy_factories entry points go to another registry)
factories = sorted(
    name for name, func in registry.factories.get_all().items()
    if getattr(func, "__module__", "").startswith("spacy_elmo")
)
print(json.dumps({"architectures": architectures, "factories": factories}))
"""


# The installed distribution's entry points, as a process outside the repository sees them: inside it, a
# stale spacy_elmo.egg-info left in the working tree by an earlier editable install could shadow them.
INSTALLED = r"""
import json, sys
from importlib import metadata
try:
    dist = metadata.distribution(sys.argv[1])
except metadata.PackageNotFoundError:
    print(json.dumps(None))
else:
    groups = {}
    for entry_point in dist.entry_points:
        groups.setdefault(entry_point.group, {})[entry_point.name] = entry_point.value
    print(json.dumps(groups))
"""


@functools.cache
def _installed() -> Optional[str]:
    result = _run_python(INSTALLED, DIST_NAME)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-1]


def _installed_entry_points() -> dict[str, dict[str, str]]:
    groups = json.loads(_installed())
    if groups is None:
        pytest.skip(f"{DIST_NAME} is not installed (pip install -e .): entry points cannot be checked")
    return groups


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    _installed_entry_points()  # skips if the package is not installed
    names = {"architectures": ARCHITECTURES, "factories": FACTORIES, "cli": CLI_PLUGINS}
    result = _run_python(RESOLVE, json.dumps(names))
    assert result.returncode == 0, f"resolving the entry points failed:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def decorated() -> dict[str, Any]:
    result = _run_python(DECORATED)
    assert result.returncode == 0, f"importing spacy_elmo failed:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_pyproject_declares_the_plugin_groups():
    assert ARCHITECTURES and FACTORIES and CLI_PLUGINS and SCRIPTS
    assert all(name.startswith("spacy-elmo.") and name.endswith(".v1") for name in ARCHITECTURES)


@pytest.mark.parametrize("group", ["spacy_factories", "spacy_architectures", "spacy_cli", "console_scripts"])
def test_installed_entry_points_match_pyproject(group):
    installed = _installed_entry_points().get(group, {})
    assert installed == ENTRY_POINTS.get(group, {}), (
        f"the installed {DIST_NAME} has other {group} entry points than pyproject.toml: reinstall (pip install -e .)"
    )


def test_spacy_does_not_import_the_package_by_itself(resolved):
    assert not resolved["imported_by_spacy"]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_from_registry(resolved, name):
    # Can't be constructed without arguments: resolving is the check, as in spacy-curated-transformers.
    assert resolved["architectures"][name] == ENTRY_POINTS["spacy_architectures"][name]


def test_every_registered_architecture_has_an_entry_point(decorated):
    assert decorated["architectures"] == ARCHITECTURES, (
        "spacy-elmo registers architectures (@registry.architectures) that pyproject.toml's "
        "[project.entry-points.spacy_architectures] does not list, or the other way round"
    )


@pytest.mark.parametrize("name", FACTORIES)
def test_factory_from_registry(resolved, name):
    factory = resolved["factories"][name]
    assert factory["entry_point"] == ENTRY_POINTS["spacy_factories"][name]
    assert factory["factory"] == ENTRY_POINTS["spacy_factories"][name]
    assert factory["meta_name"] == name


def test_every_registered_factory_has_an_entry_point(decorated):
    assert decorated["factories"] == FACTORIES


@pytest.mark.parametrize("name", CLI_PLUGINS)
def test_cli_plugin_from_registry(resolved, name):
    plugin = resolved["cli"][name]
    assert plugin["app_name"] == name
    assert CLI_SUBCOMMANDS <= set(plugin["commands"]), plugin["commands"]
    assert name in resolved["spacy_cli_groups"], f"`spacy {name}` is not mounted on spaCy's CLI app"


def test_spacy_cli_lists_the_subcommands():
    """`python -m spacy elmo --help`: what a user runs, through spaCy's own loading of spacy_cli."""
    _installed_entry_points()
    result = _run_python("import sys; from spacy.cli import setup_cli; sys.argv[1:] = ['elmo', '--help']; setup_cli()")
    assert result.returncode == 0, result.stderr[-4000:]
    for command in CLI_SUBCOMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("name", SCRIPTS)
def test_console_script(name):
    installed = _installed_entry_points().get("console_scripts", {})
    assert installed[name] == ENTRY_POINTS["console_scripts"][name]
    module, _, attr = installed[name].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    script = Path(sysconfig.get_path("scripts")) / name
    if not script.exists():
        pytest.skip(f"{script} is not there (installed into another scheme)")
    result = subprocess.run(
        [str(script), "--help"], cwd=str(ROOT.parent), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for command in CLI_SUBCOMMANDS:
        assert command in result.stdout
