"""pyproject.toml, read for the packaging tests (tomllib on Python 3.11+, tomli before)."""

from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def _toml_loader():
    try:
        import tomllib

        return tomllib
    except ModuleNotFoundError:  # Python < 3.11
        try:
            import tomli

            return tomli
        except ModuleNotFoundError:
            return None


def load_pyproject() -> Optional[dict[str, Any]]:
    """The parsed pyproject.toml, or None where neither tomllib nor tomli is available."""
    toml = _toml_loader()
    if toml is None:
        return None
    with PYPROJECT.open("rb") as file:
        return toml.load(file)


def declared_entry_points(pyproject: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{group: {name: "module:attr"}}, with [project.scripts] as the console_scripts group."""
    project = pyproject["project"]
    groups = {group: dict(points) for group, points in project.get("entry-points", {}).items()}
    if project.get("scripts"):
        groups["console_scripts"] = dict(project["scripts"])
    if project.get("gui-scripts"):
        groups["gui_scripts"] = dict(project["gui-scripts"])
    return groups
