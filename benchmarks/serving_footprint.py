"""What serving without torch buys: installed size, peak RSS and speed, torch-free venv against one with torch.

    python benchmarks/serving_footprint.py [--work /tmp/serving-footprint] [--docs 200] [--threads 1,0] [--repeats 3]

Why: `runtime = "onnxruntime"` exists so that a saved pipeline serves where torch is not installed; this
puts numbers on that. Two virtualenvs are made under --work (`python -m venv` with this interpreter; kept
and re-used by a later run if their requirements did not change), each with this package from a wheel of
the working tree, installed with --no-deps as the README says:

    no-torch: spacy "onnxruntime>=1.20,<2" h5py      (the README's serving install)
    torch:    spacy torch==2.13.0 h5py               (a serving install of the torch runtime)

plus the same onnxruntime, --no-deps, in a --target folder put on PYTHONPATH for one comparison row (the
onnxruntime pipeline where torch is installed), so the torch venv itself stays as listed. The dev venv
running this script saves two pipelines of the shipped en_elmo_small (sentencizer + elmo, torch and
onnxruntime runtimes) into --work.

Measured, by walking directories (not by asking pip): each venv's site-packages, in total and per
distribution (files attributed through the dist-info RECORDs). Per (venv, pipeline, threads), a fresh
process (repeated --repeats times, round robin): `import spacy`, `spacy.load`, the first doc, then
`nlp.pipe` over --docs paragraphs of WikiText-103 validation; the peak RSS is the process's own
(`os.wait4`'s ru_maxrss, from start to finish) and VmHWM right after `spacy.load`. Times: best of the
repeats; they are noisy on a shared machine, and the embedding time includes writing each doc's layers
to disk (for the comparison below), alike in every run. Checked: `import torch` fails in the torch-free venv, no
torch* module was imported by any run there, no torch* file lies in its site-packages, and every run's
layers equal (max relative difference per doc, max|a-b| / max|b|) those of the onnxruntime pipeline run
in the dev venv.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
DEFAULT_TEXT = ROOT / "assets/wikitext/wiki103.valid.tokens"
ORT_REQUIREMENT = "onnxruntime>=1.20,<2"
VENVS = {
    "no-torch": ["spacy", ORT_REQUIREMENT, "h5py"],
    "torch": ["spacy", "torch==2.13.0", "h5py"],
}
VERSIONS = ("spacy", "numpy", "onnxruntime", "torch", "spacy-elmo")
MB = 2**20


# --- in a serving venv (stdlib imports only at the top: this file runs where torch is not) -------------


def vm_hwm_mb() -> float:
    for line in open("/proc/self/status", encoding="utf-8"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(args: argparse.Namespace) -> None:
    """One measured run: load the pipeline, embed the docs, write the report (and the layers)."""
    from importlib import metadata

    texts = Path(args.docs_file).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    import numpy
    import spacy

    import_s = time.perf_counter() - start
    start = time.perf_counter()
    nlp = spacy.load(args.pipeline, config={"components": {"elmo": {"model": {"n_threads": args.threads}}}})
    load_s = time.perf_counter() - start
    rss_after_load = vm_hwm_mb()
    start = time.perf_counter()
    nlp(texts[0])
    first_doc_s = time.perf_counter() - start
    tokens = 0
    start = time.perf_counter()
    with open(args.layers_out, "wb") as layers:
        for doc in nlp.pipe(texts, batch_size=64):
            tokens += len(doc)
            numpy.save(layers, numpy.asarray(doc._.elmo_layers, dtype=numpy.float32))
    embed_s = time.perf_counter() - start
    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    report = {
        "runtime": nlp.get_pipe("elmo").runtime,
        "import_s": import_s,
        "load_s": load_s,
        "first_doc_s": first_doc_s,
        "embed_s": embed_s,
        "docs": len(texts),
        "tokens": tokens,
        "rss_after_load_mb": rss_after_load,
        "torch_modules": sorted(m for m in sys.modules if m.startswith(("torch", "functorch"))),
        "versions": versions,
    }
    Path(args.report).write_text(json.dumps(report), encoding="utf-8")


def make_pipelines(out: Path) -> None:
    """In the dev venv: the shipped model behind both runtimes, saved."""
    import spacy

    for runtime in ("torch", "onnxruntime"):
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo", config={"model": {"runtime": runtime}})
        nlp.initialize()
        shutil.rmtree(out / runtime, ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        nlp.to_disk(out / runtime)


# --- in the dev venv: set up, run, report --------------------------------------------------------------


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}")
    return done


def serving_env(extra_path: str = "") -> dict[str, str]:
    """The environment of a serving process: nothing of the dev venv or the user's site leaks in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    if extra_path:
        env["PYTHONPATH"] = extra_path
    return env


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def make_venv(venv: Path, requirements: list[str], wheel: Path) -> None:
    """A venv with `requirements`, re-used when it already has them; the package's wheel always reinstalled."""
    marker = venv / ".footprint-requirements"
    wanted = json.dumps(requirements)
    if not (marker.is_file() and marker.read_text() == wanted):
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin/python"), "-m", "pip", "install", "-q", *requirements], env=serving_env())
        marker.write_text(wanted)
    python = str(venv / "bin/python")
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], env=serving_env())


def build_wheel(work: Path) -> Path:
    """A wheel of the working tree, built from a copy (so that the build leaves nothing in the repository)."""
    source, wheels = work / "src", work / "wheel"
    for folder in (source, wheels):
        shutil.rmtree(folder, ignore_errors=True)
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "spacy_elmo", source / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    return next(wheels.glob("spacy_elmo-*.whl"))


def sizes_by_distribution(site: Path) -> dict[str, int]:
    """Bytes (apparent sizes of the files found by walking `site`) per distribution; a file no RECORD names
    goes to the distribution owning its top-level folder, else to "(other)"."""
    owner: dict[str, str] = {}
    top_owner: dict[str, str] = {}
    for record in site.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0].lower().replace("_", "-")
        for line in record.read_text(encoding="utf-8").splitlines():
            path = line.rsplit(",", 2)[0]
            if path and not path.startswith(".."):
                owner[path] = name
                top_owner.setdefault(path.split("/")[0], name)
    sizes: dict[str, int] = {}
    for folder, _, files in os.walk(site):
        for file in files:
            full = Path(folder) / file
            if full.is_symlink():
                continue
            relative = full.relative_to(site).as_posix()
            name = owner.get(relative) or top_owner.get(relative.split("/")[0], "(other)")
            sizes[name] = sizes.get(name, 0) + full.stat().st_size
    return sizes


def read_layers(path: Path):
    import numpy

    with open(path, "rb") as handle:
        while handle.peek(1):
            yield numpy.load(handle)


def max_relative_diff(path: Path, reference: Path) -> float:
    ours, theirs = list(read_layers(path)), list(read_layers(reference))
    if not ours or len(ours) != len(theirs) or any(a.shape != b.shape for a, b in zip(ours, theirs)):
        return float("inf")
    return max(float(abs(a - b).max()) / (float(abs(b).max()) or 1.0) for a, b in zip(ours, theirs))


def wiki_paragraphs(path: Path, n: int) -> list[str]:
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("="):
            out.append(line)
            if len(out) == n:
                return out
    raise SystemExit(f"{path} has fewer than {n} paragraphs")


def measure(python: Path, pipeline: Path, threads: int, work: Path, label: str, extra_path: str = "") -> dict:
    report, layers = work / "reports" / f"{label}.json", work / "layers" / f"{label}.npy"
    for folder in (report.parent, layers.parent):
        folder.mkdir(parents=True, exist_ok=True)
    command = [
        str(python), str(Path(__file__).resolve()), "--child", "--pipeline", str(pipeline),
        "--threads", str(threads), "--docs-file", str(work / "docs.txt"),
        "--report", str(report), "--layers-out", str(layers),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=work, env=serving_env(extra_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    errors = process.stderr.read().decode()  # type: ignore[union-attr]
    if status != 0:
        raise SystemExit(f"{label} failed ({status}): {errors[-3000:]}")
    result = json.loads(report.read_text())
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    result["layers"] = layers
    return result


def torch_free_checks(venv: Path) -> dict[str, object]:
    python = str(venv / "bin/python")
    attempt = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, env=serving_env())
    last = attempt.stderr.strip().splitlines()[-1] if attempt.stderr.strip() else ""
    site = site_packages(venv)
    files = [p.name for p in site.iterdir() if p.name.lower().startswith(("torch", "functorch"))]
    return {"import_torch_fails": attempt.returncode != 0, "import_torch_error": last, "torch_entries": files}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", default="/tmp/serving-footprint")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--threads", default="1,0", help="n_threads settings (0 = the runtime's default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--text", default=str(DEFAULT_TEXT))
    parser.add_argument("--output", default="")
    # internal: the measured process, and the pipelines' maker
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--make-pipelines", default="", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", help=argparse.SUPPRESS)
    parser.add_argument("--docs-file", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    parser.add_argument("--layers-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.threads = int(args.threads)
        return child(args)
    if args.make_pipelines:
        return make_pipelines(Path(args.make_pipelines))

    from common import describe_machine

    load_before = os.getloadavg()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    setup_start = time.perf_counter()
    wheel = build_wheel(work)
    venvs = {name: work / name for name in VENVS}
    for name, requirements in VENVS.items():
        make_venv(venvs[name], requirements, wheel)
    ort_version = run(
        [str(venvs["no-torch"] / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('onnxruntime'))"]
    ).stdout.strip()
    addon = work / "ort-addon"
    addon_marker = addon / ".footprint-version"
    if not (addon_marker.is_file() and addon_marker.read_text() == ort_version):
        shutil.rmtree(addon, ignore_errors=True)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(addon),
                f"onnxruntime=={ort_version}",
            ]
        )
        addon_marker.write_text(ort_version)
    (work / "docs.txt").write_text("\n".join(wiki_paragraphs(Path(args.text), args.docs)) + "\n", encoding="utf-8")
    pipelines = work / "pipelines"
    run([sys.executable, str(Path(__file__).resolve()), "--make-pipelines", str(pipelines)])
    setup_s = time.perf_counter() - setup_start

    dev_python = Path(sys.executable)
    reference = measure(dev_python, pipelines / "onnxruntime", 1, work, "dev-onnxruntime-t1")
    rows = [
        ("no-torch", "onnxruntime", ""),
        ("torch", "torch", ""),
        ("torch", "onnxruntime", str(addon)),
    ]
    threads = [int(t) for t in args.threads.split(",")]
    results: dict[tuple[str, str, int], list[dict]] = {}
    for _ in range(args.repeats):
        for venv, runtime, extra in rows:
            for n in threads:
                label = f"{venv}-{runtime}-t{n}"
                result = measure(venvs[venv] / "bin/python", pipelines / runtime, n, work, label, extra)
                result["max_rel_diff"] = max_relative_diff(result["layers"], reference["layers"])
                results.setdefault((venv, runtime, n), []).append(result)
    checks = torch_free_checks(venvs["no-torch"])
    load_after = os.getloadavg()
    machine = describe_machine()

    print(f"# Serving footprint ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print(f"machine: {machine['device']}; Python {machine['python']}; setup {setup_s:.0f} s")
    print(f"load average (1/5/15 min) before: {'/'.join(f'{x:.2f}' for x in load_before)}, ", end="")
    print(f"after: {'/'.join(f'{x:.2f}' for x in load_after)}")
    sample = results[("no-torch", "onnxruntime", threads[0])][0]
    tokens = sample["tokens"]
    print(f"docs: {sample['docs']} WikiText-103 validation paragraphs, {tokens:,} spaCy tokens")
    for name in venvs:
        versions = next(rs[0]["versions"] for (v, _, _), rs in results.items() if v == name)
        shown = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
        print(f"{name} venv: {shown}")
    print(f"pipelines saved: {', '.join(f'{p.name} {dir_mb(p):.1f} MB' for p in sorted(pipelines.iterdir()))}\n")

    sizes = {name: sizes_by_distribution(site_packages(venv)) for name, venv in venvs.items()}
    addon_mb = dir_mb(addon)
    totals = {name: sum(s.values()) / MB for name, s in sizes.items()}
    biggest = sorted(
        {d for s in sizes.values() for d in sorted(s, key=s.get, reverse=True)[:6]} | {"spacy-elmo", "spacy"},
        key=lambda d: -max(s.get(d, 0) for s in sizes.values()),
    )
    print("Installed size, site-packages (MB = 2^20 bytes, apparent sizes of the files walked):\n")
    print("| distribution | no-torch venv | torch venv |")
    print("|---|---|---|")
    for dist in biggest:
        cells = [f"{sizes[v].get(dist, 0) / MB:,.1f}" if dist in sizes[v] else "-" for v in venvs]
        print(f"| {dist} | {' | '.join(cells)} |")
    rest = [sum(v for d, v in sizes[name].items() if d not in biggest) / MB for name in venvs]
    print(f"| everything else | {rest[0]:,.1f} | {rest[1]:,.1f} |")
    print(f"| **total** | **{totals['no-torch']:,.1f}** | **{totals['torch']:,.1f}** |")
    print(f"\n(the onnxruntime added to the torch venv for the comparison row: {addon_mb:,.1f} MB, not counted)\n")

    print(f"Load and embed, a fresh process per run, best time / highest RSS of {args.repeats} (times noisy):\n")
    print(
        "| venv | pipeline | n_threads | peak RSS MB | RSS after load MB | import spacy s | spacy.load s "
        "| first doc s | tokens/s | torch imported | max rel diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for venv, runtime, extra in rows:
        for n in threads:
            runs = results[(venv, runtime, n)]
            best = {k: min(r[k] for r in runs) for k in ("import_s", "load_s", "first_doc_s", "embed_s")}
            peak = max(r["peak_rss_mb"] for r in runs)
            after_load = max(r["rss_after_load_mb"] for r in runs)
            imported = any(r["torch_modules"] for r in runs)
            diff = max(r["max_rel_diff"] for r in runs)
            where = venv + (" + onnxruntime" if extra else "")
            print(
                f"| {where} | {runtime} | {n or 'default'} | {peak:,.0f} | {after_load:,.0f} | {best['import_s']:.2f} "
                f"| {best['load_s']:.2f} | {best['first_doc_s']:.2f} | {tokens / best['embed_s']:,.0f} "
                f"| {'yes' if imported else 'no'} | {diff:.1e} |"
            )
            record = {
                "bench": "serving_footprint",
                "venv": where,
                "runtime": runtime,
                "n_threads": n,
                "peak_rss_mb": round(peak, 1),
                "rss_after_load_mb": round(after_load, 1),
                **{k: round(v, 3) for k, v in best.items()},
                "tokens_per_s": round(tokens / best["embed_s"], 1),
                "torch_imported": imported,
                "max_rel_diff": diff,
                "site_packages_mb": round(totals[venv], 1),
                "date": time.strftime("%Y-%m-%d"),
                "device": machine["device"],
            }
            if args.output:
                with open(args.output, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record) + "\n")
    no_torch_runs = [r for (v, _, _), rs in results.items() if v == "no-torch" for r in rs]
    leaked = sorted({m for r in no_torch_runs for m in r["torch_modules"]})
    print(
        f"\nReference: the onnxruntime pipeline in the dev venv (n_threads 1): peak RSS "
        f"{reference['peak_rss_mb']:,.0f} MB, {tokens / reference['embed_s']:,.0f} tokens/s; max rel diff = the "
        "largest over docs of max|a-b| / max|b| against its layers."
    )
    print(
        f"Torch-free venv: `import torch` {'fails' if checks['import_torch_fails'] else 'SUCCEEDS'} "
        f"({checks['import_torch_error']}); torch* modules imported by its runs: {leaked or 'none'}; "
        f"torch* entries in its site-packages: {checks['torch_entries'] or 'none'}."
    )


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / MB


if __name__ == "__main__":
    main()
