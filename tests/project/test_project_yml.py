"""project.yml: loads, every workflow step is a command whose files exist, and every command can be
skipped on a second run (it has outputs) and re-runs when its inputs change (it has deps)."""

import re

import srsly
from weasel.util import load_project_config

from fixture_paths import ROOT


def _config():
    return load_project_config(ROOT)


def test_workflow_steps_are_commands_with_deps_and_outputs():
    config = _config()
    commands = {c["name"]: c for c in config["commands"]}
    assert config["workflows"]["all"], "no 'all' workflow"
    for step in [step for steps in config["workflows"].values() for step in steps]:
        assert step in commands, f"workflow step {step!r} is not a command"
        assert commands[step].get("outputs"), f"{step}: no outputs, so a second run could not skip it"
        assert commands[step].get("deps"), f"{step}: no deps, so it would not re-run when its inputs change"


def test_no_dependency_or_output_was_merged_by_interpolation():
    # weasel joins adjacent list items that are only a ${vars.x}: "a, b" would be one missing path
    for command in _config()["commands"]:
        for path in command.get("deps", []) + command.get("outputs", []):
            assert ", " not in path, f"{command['name']}: {path!r}"


def test_no_list_item_was_merged_by_interpolation():
    # more generally, an item ending in a ${vars.x} is joined with a next one starting with one:
    # two script lines would become one command
    written = {c["name"]: c for c in srsly.read_yaml(ROOT / "project.yml")["commands"]}
    for command in _config()["commands"]:
        for key in ("script", "deps", "outputs"):
            assert len(command.get(key, [])) == len(written[command["name"]].get(key, [])), (command["name"], key)


def test_a_self_contained_project_of_a_few_commands_with_readable_vars():
    text = (ROOT / "project.yml").read_text(encoding="utf8")
    assert len(text) < 10_000
    config = _config()
    assert 5 <= len(config["commands"]) <= 8
    assert [c["name"] for c in config["commands"]] == config["workflows"]["all"], "the commands, in the order they run"
    for command in config["commands"]:
        assert command.get("help") and "\n" not in command["help"], command["name"]
    for name, value in config["vars"].items():
        assert "--" not in str(value), f"vars.{name} packs flags: write them in the command or the script"
    # no test fixtures and no check scripts: the package's tests make those checks
    assert "tests/" not in text and "check_" not in text
    assert not list((ROOT / "project" / "scripts").glob("check_*.py"))


def test_scripts_configs_and_committed_inputs_exist():
    config = _config()
    for command in config["commands"]:
        for line in command["script"]:
            for path in re.findall(r"(project/(?:scripts|configs)/[\w.]+)", line):
                assert (ROOT / path).is_file(), f"{command['name']}: {path} does not exist"
        for dep in command.get("deps", []):
            if dep.startswith(("assets", "project/")):
                assert (ROOT / dep).exists(), f"{command['name']}: dependency {dep} does not exist"


def test_optional_data_is_off_by_default_and_nothing_restricted_is_committed():
    config = _config()
    assert config["vars"]["conll_dir"] == "" and config["vars"]["sst5_dir"] == ""
    committed = {p.relative_to(ROOT / "assets").parts[0] for p in (ROOT / "assets").rglob("*") if p.is_file()}
    assert committed == {"README.md", "gutenberg", "wikitext", "wnut17", "mr-polarity"}
    total = sum(p.stat().st_size for p in (ROOT / "assets").rglob("*") if p.is_file())
    assert total < 12_000_000
