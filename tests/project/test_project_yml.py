"""project.yml: loads, every workflow step is a command whose files exist, and every command can be
skipped on a second run (it has outputs) and re-runs when its inputs change (it has deps)."""

import re
from pathlib import Path

from weasel.util import load_project_config

REPO = Path(__file__).resolve().parents[2]


def _config():
    return load_project_config(REPO)


def test_workflow_steps_are_commands_with_deps_and_outputs():
    config = _config()
    commands = {c["name"]: c for c in config["commands"]}
    assert config["workflows"]["all"], "no 'all' workflow"
    for step in config["workflows"]["all"]:
        assert step in commands, f"workflow step {step!r} is not a command"
        assert commands[step].get("outputs"), f"{step}: no outputs, so a second run could not skip it"
        assert commands[step].get("deps"), f"{step}: no deps, so it would not re-run when its inputs change"


def test_no_dependency_or_output_was_merged_by_interpolation():
    # weasel joins adjacent list items that are only a ${vars.x}: "a, b" would be one missing path
    for command in _config()["commands"]:
        for path in command.get("deps", []) + command.get("outputs", []):
            assert ", " not in path, f"{command['name']}: {path!r}"


def test_scripts_configs_and_committed_inputs_exist():
    config = _config()
    for command in config["commands"]:
        for line in command["script"]:
            for path in re.findall(r"(project/(?:scripts|configs)/[\w.]+)", line):
                assert (REPO / path).is_file(), f"{command['name']}: {path} does not exist"
        for dep in command.get("deps", []):
            if dep.startswith(("assets/", "project/", "tests/")):
                assert (REPO / dep).exists(), f"{command['name']}: dependency {dep} does not exist"


def test_optional_data_is_off_by_default_and_nothing_restricted_is_committed():
    config = _config()
    assert config["vars"]["conll_dir"] == "" and config["vars"]["sst5_dir"] == ""
    committed = {p.relative_to(REPO / "assets").parts[0] for p in (REPO / "assets").rglob("*") if p.is_file()}
    assert committed == {"README.md", "gutenberg", "wikitext", "wnut17", "mr-polarity"}
    total = sum(p.stat().st_size for p in (REPO / "assets").rglob("*") if p.is_file())
    assert total < 12_000_000
