"""Install a pipeline made by `spacy package` into a scratch folder, load it, and run a doc.

    python project/scripts/check_package.py packages/en_ner_elmo-0.0.0 metrics/checks/package.json

This is what a user of the packaged pipeline does (`pip install` then `spacy.load(name)`), minus the
network: pip installs the package directory with --no-deps (spacy-elmo and spaCy are already in this
environment) into a temporary --target, and a fresh interpreter imports it from there, loads it and
runs a doc through it, so nothing of this process's state (e.g. already-registered functions) helps.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from common import exit_on, finish_check

TEXT = "Apple is looking at buying a U.K. startup for $1 billion, said Tim Cook in London on Monday."

PROBE = r"""
import json, sys, importlib
import numpy
name, text = sys.argv[1], sys.argv[2]
module = importlib.import_module(name)
nlp = module.load()
doc = nlp(text)
report = {
    "module_file": module.__file__,
    "pipe_names": nlp.pipe_names,
    "n_tokens": len(doc),
    "ents": [[e.text, e.label_] for e in doc.ents],
}
if doc.has_extension("elmo") and doc._.elmo is not None:
    vectors = numpy.asarray(doc._.elmo)
    report["elmo_shape"] = list(vectors.shape)
    report["elmo_finite"] = bool(numpy.isfinite(vectors).all())
print("PROBE-RESULT " + json.dumps(report))
"""


def package_name(package_dir: Path) -> str:
    meta_path = package_dir / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} not found: is {package_dir} a directory made by `spacy package`?")
    meta = json.loads(meta_path.read_text(encoding="utf8"))
    return f"{meta['lang']}_{meta['name']}"


def check(package_dir: Path, text: str = TEXT) -> dict[str, Any]:
    name = package_name(package_dir)
    with tempfile.TemporaryDirectory(prefix="spacy-elmo-package-") as scratch:
        # pip builds in the source directory: a copy keeps the workflow's output as `spacy package` wrote it
        source, target = Path(scratch) / "source", str(Path(scratch) / "site")
        shutil.copytree(package_dir, source)
        pip = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            target,
            str(source),
        ]
        installed = subprocess.run(pip, capture_output=True, text=True)
        if installed.returncode != 0:
            raise RuntimeError(f"pip could not install {package_dir}:\n{installed.stdout}{installed.stderr}")
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([target, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        )
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, name, text], capture_output=True, text=True, env=env, cwd=target
        )
        if probe.returncode != 0:
            raise RuntimeError(f"the installed package {name} failed to load or run:\n{probe.stderr[-3000:]}")
        line = next((out for out in probe.stdout.splitlines() if out.startswith("PROBE-RESULT ")), None)
        if line is None:
            raise RuntimeError(f"no result from the probe of {name}:\n{probe.stdout[-2000:]}")
        report = json.loads(line[len("PROBE-RESULT ") :])
    problems = []
    if not report["module_file"].startswith(target):
        problems.append(f"{name} was imported from {report['module_file']}, not from the scratch install")
    for pipe in ("elmo", "ner"):
        if pipe not in report["pipe_names"]:
            problems.append(f"pipe '{pipe}' missing from {report['pipe_names']}")
    if report["n_tokens"] == 0:
        problems.append("the doc has no tokens")
    if "elmo_finite" in report and not report["elmo_finite"]:
        problems.append("doc._.elmo holds NaN or infinite values")
    report.update(
        package=name,
        passed=not problems,
        problems=problems,
        summary=(
            f"installed {name}, loaded pipes {report['pipe_names']}, found {len(report['ents'])} entities"
            if not problems
            else "; ".join(problems)
        ),
    )
    return report


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package_dir", type=Path, help="the directory `spacy package` wrote (holding setup.py)")
    parser.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    with exit_on(FileNotFoundError, RuntimeError):
        report = check(args.package_dir)
    finish_check(report, args.output)


if __name__ == "__main__":
    main()
