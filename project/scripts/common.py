"""What the project's scripts share: the table of tasks and variants, how a step runs a command (with
capped math threads, timed, failing loudly; spaCy's own in this process), how a task is trained and
evaluated, and how scripts end.

Tasks: WNUT-17 (`ner`) and MR (`textcat`) from assets/ always run; CoNLL-2003 and SST-5 only when their
data directory is given (they cannot be redistributed). Each task is trained in three variants with the
configs `project/configs/<component>_{baseline,elmo}.cfg` (the ELMo ones: the shipped configs with the
project's changes, merged by `full_config`): spaCy's own tok2vec, ELMo from the project's
biLM and ELMo from the shipped one (or any model path). Files of a run NAME = <task>-<variant>:
corpus/<task>/, training/NAME/ (model-best, timing.json), metrics/eval/NAME.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

# the pipes trained here: spaCy's score key for each, and what people call it (single-label textcat:
# micro-averaged F equals accuracy)
METRICS: dict[str, tuple[str, str]] = {"ner": ("ents_f", "entity F1"), "textcat": ("cats_micro_f", "accuracy")}


@dataclass(frozen=True)
class Task:
    name: str
    dataset: str
    component: str  # the trained pipe, a key of METRICS
    eval_split: str  # the split `spacy evaluate` scores: test, or dev where the data has no public test
    required: bool  # in every run of the workflow; optional tasks run when their data directory is given
    format: str  # how its files are read: wnut, conll (convert_ner.py), mr, sst5 (convert_textcat.py)
    source: str = ""  # its data directory in assets/; "" for the optional tasks (the user gives one)
    # (split, file name in the data directory); MR has one set, split by a seed. An optional task's test
    # file may be absent.
    files: tuple[tuple[str, str], ...] = ()

    @property
    def metric(self) -> str:
        return METRICS[self.component][0]

    @property
    def metric_label(self) -> str:
        return METRICS[self.component][1]


WNUT17_FILES = (("train", "wnut17train.conll"), ("dev", "emerging.dev.conll"), ("test", "emerging.test.annotated"))
CONLL_FILES = (("train", "train.txt"), ("dev", "valid.txt"), ("test", "test.txt"))
SST5_FILES = (("train", "train.txt"), ("dev", "dev.txt"), ("test", "test.txt"))
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("ner", "WNUT-17", "ner", "test", True, "wnut", "assets/wnut17", WNUT17_FILES),
        Task("textcat", "MR", "textcat", "test", True, "mr", "assets/mr-polarity"),
        Task("conll", "CoNLL-2003", "ner", "dev", False, "conll", files=CONLL_FILES),
        Task("sst5", "SST-5", "textcat", "dev", False, "sst5", files=SST5_FILES),
    )
}
VARIANTS: dict[str, str] = {
    "baseline": "baseline (spaCy tok2vec)",
    "elmo": "ELMo (project biLM, domain-adapted)",
    "elmo_shipped": "ELMo (shipped model)",
}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def spacy_app() -> Any:
    """spaCy's command line, with the commands packages add (as `python -m spacy` registers them)."""
    import spacy.cli
    from spacy.util import registry

    registry.cli.get_all()
    return spacy.cli.app


def spacy_elmo_app() -> Any:
    from spacy_elmo.cli import elmo_cli

    return elmo_cli


# the modules whose `python -m` commands `run` runs in this process: their command line apps
IN_PROCESS: dict[str, Callable[[], Any]] = {"spacy": spacy_app, "spacy_elmo": spacy_elmo_app}


def run(command: Sequence[str], threads: int = 0, log: Optional[Path] = None) -> float:
    """Run `command` (a leading `python` is this interpreter, as weasel does) with its math libraries
    (OpenMP, MKL, OpenBLAS, and through them PyTorch) capped at `threads` (0 = their defaults), its
    output in `log` if given; its wall time in seconds. A failure exits with the command's status.
    `python -m spacy ...` (training, evaluation) and `python -m spacy_elmo ...` run in this process, through
    their own command lines: a run saves a Python start and its imports, seconds each."""
    command = list(command)
    if command[0] in ("python", "python3") and command[1:2] == ["-m"] and command[2] in IN_PROCESS:
        return run_in_process(command[2], command[3:], threads, log)
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    env = dict(os.environ, **{name: str(threads) for name in THREAD_VARIABLES}) if threads > 0 else None
    started = time.time()
    if log is None:
        returncode = subprocess.run(command, env=env).returncode
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w", encoding="utf-8") as handle:
            returncode = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env).returncode
    if returncode:
        where = f" (see {log})" if log else ""
        print(f"error: command failed ({returncode}): {' '.join(command)}{where}", file=sys.stderr)
        raise SystemExit(returncode)
    return time.time() - started


def run_in_process(module: str, args: Sequence[str], threads: int = 0, log: Optional[Path] = None) -> float:
    """`python -m MODULE ARGS` (a key of IN_PROCESS) in this process, as `run` promises: torch's threads
    capped at `threads` while it runs, its output in `log`; its wall time. A failure exits with its status
    (1 for an exception)."""
    import torch
    from typer.main import get_command

    app = IN_PROCESS[module]()
    before = torch.get_num_threads()
    started = time.time()
    failure: Optional[BaseException] = None
    with ExitStack() as stack:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(log.open("w", encoding="utf-8"))
            stack.enter_context(redirect_stdout(handle))
            stack.enter_context(redirect_stderr(handle))
        try:
            if threads > 0:
                torch.set_num_threads(threads)
            status = get_command(app).main(args=list(args), prog_name=f"python -m {module}", standalone_mode=False)
            if isinstance(status, int) and status != 0:  # a command's `typer.Exit(code)`
                failure = SystemExit(status)
        except SystemExit as err:  # spaCy's `msg.fail` ends a failure so
            failure = err if err.code not in (0, None) else None
        except Exception as err:
            if callable(getattr(err, "show", None)) and isinstance(getattr(err, "exit_code", None), int):
                err.show()  # a bad argument (click's exceptions, typer's copy too): said as the command line does
                failure = SystemExit(err.exit_code)
            else:
                traceback.print_exc()
                failure = err
        finally:
            torch.set_num_threads(before)
    if failure is not None:
        where = f" (see {log})" if log else ""
        print(f"error: command failed ({failure!r}): {module} {' '.join(args)}{where}", file=sys.stderr)
        code = failure.code if isinstance(failure, SystemExit) else 1
        raise SystemExit(code if isinstance(code, int) else 1) from failure
    return time.time() - started


def timed(output: Optional[Path], command: Sequence[str], threads: int = 0, log: Optional[Path] = None) -> float:
    """`run`, and its wall time recorded in `output` (JSON) when given."""
    wall = run(command, threads, log)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        record = {"command": list(command[1:] if command[0] in ("python", "python3") else command)}
        output.write_text(json.dumps({**record, "wall_time_s": round(wall, 2)}, indent=2) + "\n", encoding="utf8")
    return wall


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The settings of every training and evaluation run (the project's vars.run)."""
    parser.add_argument("--elmo", default="training/bilm-domain/model", help="the project's biLM (variant 'elmo')")
    parser.add_argument(
        "--pretrained-elmo",
        default="",
        help="variant 'elmo_shipped': '' = the shipped model, or any model path (native, bilm-tf, NLPL .zip, "
        "ELMoForManyLangs)",
    )
    parser.add_argument("--lang", default="", help="the pipelines' language (a spaCy code); '' = the configs' (en)")
    parser.add_argument("--gpu-id", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="math threads per process (0 = their defaults)")
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--eval-frequency", type=int, default=200)
    parser.add_argument("--configs", type=Path, default=Path("project/configs"))
    parser.add_argument("--corpus", type=Path, default=Path("corpus"))
    parser.add_argument("--training", type=Path, default=Path("training"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics"))


def full_config(config: Path, into: Path) -> Path:
    """`config` as `spacy train` reads it. A config with `[project] extends = NAME` holds only what the project
    changes in the package's shipped config NAME (`python -m spacy_elmo config NAME`), so the two cannot drift
    apart: merged and filled with spaCy's defaults (`spacy init fill-config`, as the shipped configs are base
    configs), it is written to `into`. Any other config is used as it is."""
    from spacy.cli.init_config import fill_config
    from thinc.api import Config

    from spacy_elmo.cli.config import CONFIGS_DIR

    changes = Config().from_disk(config, interpolate=False)
    if "project" not in changes:
        return config
    shipped = CONFIGS_DIR / f"{changes.pop('project')['extends']}.cfg"
    into.parent.mkdir(parents=True, exist_ok=True)
    Config().from_disk(shipped, interpolate=False).merge(changes).to_disk(into)
    fill_config(into, into, silent=True)
    return into


def train(task: Task, variant: str, epochs: int, args: argparse.Namespace) -> float:
    """`spacy train` one variant of a task into training/<task>-<variant> (with timing.json); its wall time."""
    corpus = args.corpus / task.name
    output = args.training / f"{task.name}-{variant}"
    config = args.configs / f"{task.component}_{'baseline' if variant == 'baseline' else 'elmo'}.cfg"
    config = full_config(config, args.training / f"{task.name}-{variant}.cfg")
    command = ["python", "-m", "spacy", "train", str(config), "--output", str(output)]
    command += ["--paths.train", str(corpus / "train.spacy"), "--paths.dev", str(corpus / "dev.spacy")]
    if variant != "baseline":
        command.append(f"--paths.elmo={args.elmo if variant == 'elmo' else args.pretrained_elmo}")
    if getattr(args, "lang", ""):
        command += ["--nlp.lang", args.lang]
    command += ["--gpu-id", str(args.gpu_id), "--system.seed", str(args.seed), "--training.max_epochs", str(epochs)]
    command += ["--training.max_steps", str(args.max_steps), "--training.eval_frequency", str(args.eval_frequency)]
    return timed(output / "timing.json", command, args.threads)


def evaluate(run_name: str, data: Path, output: Path, args: argparse.Namespace, timing: Optional[Path] = None) -> None:
    """`spacy evaluate --per-component` training/<run_name>/model-best on `data`, scores in `output`."""
    model = args.training / run_name / "model-best"
    output.parent.mkdir(parents=True, exist_ok=True)
    command = ["python", "-m", "spacy", "evaluate", str(model), str(data), "--output", str(output)]
    timed(timing, command + ["--per-component", "--gpu-id", str(args.gpu_id)], args.threads)


@contextmanager
def exit_on(*errors: type[Exception]) -> Iterator[None]:
    """A script's expected failures (default: missing and malformed input) end it with `error: ...`."""
    expected = errors or (FileNotFoundError, ValueError)
    try:
        yield
    except expected as err:
        sys.exit(f"error: {err}")


def convert_main(
    doc: str, convert: Callable[[str, Path, Path, int], int], formats: Sequence[str], cap: str, unit: str, argv=None
) -> None:
    """The command line of a converter: SCRIPT FORMAT INPUT OUTPUT [--CAP N]; prints what it wrote."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("format", choices=list(formats))
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument(f"--{cap}", type=int, default=0, help=f"stop at N {unit} (whole units; 0 = all)")
    args = parser.parse_args(argv)
    with exit_on():
        count = convert(args.format, args.input, args.output, getattr(args, cap.replace("-", "_")))
    print(f"wrote {count} {unit} to {args.output}")
