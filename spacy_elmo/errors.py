"""The package's own errors: `ModelFileError` (whatever the model format), `SettingError` (a value refused,
naming its setting), `MissingPackageError` (a package a feature imports only when used is not installed).

Context is added where it is known, not threaded through signatures: a reader raises naming the file and
the key; the entry point that took the value from the user (a CLI command, `BiLM.v1`, `embed`'s settings,
a saved pipeline's loading) wraps its call in `named_settings` (which option); what reads a file wraps its
parsing in `reading` (which file, what to do)."""

import contextlib
import importlib.util
import re
from collections.abc import Iterator, Sequence
from typing import Optional

from .about import __title__, __version__


class ModelFileError(ValueError):
    """A model's files cannot be read as the model they claim to be; the message names the file and the key.
    The one base of every such error, so a caller catches one type whatever the format."""


class SettingError(ValueError):
    """A value refused, the message led by `setting`, its name where it was refused ("sha256: ..."), which an
    entry point's `named_settings` replaces with the name the user gave it by ("--sha256: ...")."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


def first_line(err: BaseException) -> str:
    """The first line of what a library said (a KeyError's message without its quotes), or its type: what a
    message quotes of an error it replaces."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    return (text.strip().splitlines() or [type(err).__name__])[0][:300]


def _amend(err: BaseException, flag: str, before: str = "", after: str = "", drop: int = 0) -> None:
    """Add to the one-line message of `err` (kept: its type, traceback and fields), once per kind of context;
    `drop`: characters of its start that `before` replaces."""
    if getattr(err, flag, False) or len(err.args) != 1 or not isinstance(err.args[0], str):
        return
    err.args = (f"{before}{err.args[0][drop:]}{after}",)
    setattr(err, flag, True)


@contextlib.contextmanager
def named_settings(**names: str) -> Iterator[None]:
    """Name, in front of the message, the setting a refusal inside is about, as the user gave it: a
    `SettingError`'s own `setting` (it leads the message), anything else (a model file's error, a path not
    found) as `path`'s name, where `names` has one."""
    try:
        yield
    except (ValueError, OSError) as err:
        if isinstance(err, SettingError):
            if err.setting in names:
                _amend(err, "setting_named", before=names[err.setting], drop=len(err.setting))
        elif "path" in names:
            _amend(err, "setting_named", before=f"{names['path']}: ")
        raise


@contextlib.contextmanager
def reading(subject: str, remedy: str = "") -> Iterator[None]:
    """Name what was being read (`subject`: a file, a file's part) in front of a model file's refusal from
    inside (unless it starts with it), and what to do (`remedy`) after it; the innermost `reading` adds them."""
    try:
        yield
    except ModelFileError as err:
        named = str(err).startswith(f"{subject}:")
        _amend(err, "read_from", before="" if named else f"{subject}: ", after=f"; {remedy}" if remedy else "")
        raise


class MissingPackageError(ModuleNotFoundError):
    """A package a feature needs is not installed; the message names it and the `pip install` line to run
    (a ModuleNotFoundError, so that `except ImportError` still catches it)."""


# pyproject.toml's [project] dependencies and the extras that hints name, as written there (one copy, read
# whether or not spacy-elmo's metadata is installed); tests/test_missing_packages.py checks it against pyproject.toml.
DEPENDENCIES: tuple[str, ...] = (
    "spacy>=3.8.13,<4.0",
    "thinc>=8.3.12,<9.0",
    "torch>=2.13",
    "srsly>=2.4",
    "h5py>=3.8",
    "numpy>=1.23",
    "pydantic>=2,<3",
    "typer>=0.29,<1.0",
    "tqdm>=4.38",
    "pooch>=1.6,<2",
    "requests>=2.19",
)
EXTRAS: dict[str, tuple[str, ...]] = {
    "parquet": ("pyarrow>=15",),
    "onnx": ("onnx>=1.17,<2", "onnxruntime>=1.20,<2", "onnxscript>=0.5,<1"),
    "spark": ("pyspark[sql]>=4.0", "pyarrow>=15", "pandas<3"),
    "ray": ("ray[data]>=2.10", "pyarrow>=15"),
}
# what a hint adds for one package: PyPI's torch for Linux is the CUDA build
NOTES = {"torch": "for torch's CPU build add --index-url https://download.pytorch.org/whl/cpu"}
WHEEL = f"dist/{__title__.replace('-', '_')}-{__version__}-py3-none-any.whl"  # what `pip wheel . -w dist/` writes


def requirement_name(requirement: str) -> str:
    """ "onnxruntime>=1.20,<2" -> "onnxruntime"; "ray[data]>=2.10" -> "ray" (normalised as pip compares names)."""
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirements(extra: Optional[str] = None) -> tuple[str, ...]:
    """The requirements of `extra` (None: the dependencies) as pyproject.toml states them."""
    return DEPENDENCIES if extra is None else EXTRAS.get(extra, ())


def requirement(module: str, extra: Optional[str] = None) -> str:
    """The requirement that provides top-level `module` ("onnxruntime" -> "onnxruntime>=1.20,<2"): from
    `extra`'s, else from the dependencies, else the bare name."""
    name = requirement_name(module)
    for candidate in (*requirements(extra), *requirements(None)):
        if requirement_name(candidate) == name:
            return candidate
    return name


def extra_providing(module: str) -> Optional[str]:
    """The first extra (in `EXTRAS`' order) whose requirements provide `module`; None for a dependency."""
    name = requirement_name(module)
    if any(requirement_name(r) == name for r in requirements(None)):
        return None
    return next((extra for extra in EXTRAS if any(requirement_name(r) == name for r in requirements(extra))), None)


def is_known(module: str) -> bool:
    """Whether `module` is one of the dependencies or of an extra's requirements (what a hint can name)."""
    name = requirement_name(module)
    return any(requirement_name(r) == name for group in (None, *EXTRAS) for r in requirements(group))


def missing(*modules: str) -> list[str]:
    """Those of the top-level `modules` that cannot be imported here (found without importing them)."""
    absent = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a finder refusing it; a module half set up in sys.modules
            found = False
        if not found:
            absent.append(module)
    return absent


def missing_message(purpose: str, modules: Sequence[str], extra: Optional[str] = None) -> str:
    """One line: `purpose` needs `modules`, not installed, and the pip line installing exactly those (their
    ranges as pyproject.toml states them), then the extra as a clone or the built wheel installs it (spacy-elmo
    is not on PyPI)."""
    specs = " ".join(f'"{requirement(module, extra)}"' for module in modules)
    names = modules[0] if len(modules) == 1 else f"{', '.join(modules[:-1])} and {modules[-1]}"
    line = f"{purpose} needs {names}, which {'is' if len(modules) == 1 else 'are'} not installed: pip install {specs}"
    if extra is not None:
        line += (
            f' (or the [{extra}] extra: pip install ".[{extra}]" in a clone of {__title__}, '
            f'pip install "{WHEEL}[{extra}]" with its wheel)'
        )
    else:
        line += f" (a dependency of {__title__}, which pip install --no-deps leaves out)"
    return line + "".join(f"; {NOTES[module]}" for module in modules if module in NOTES)


def require(purpose: str, *modules: str, extra: Optional[str] = None) -> None:
    """Raise `MissingPackageError` naming every one of `modules` that is not installed, and how to install
    them, so that a feature fails before its work starts rather than at its end with a traceback."""
    absent = missing(*modules)
    if absent:
        raise MissingPackageError(missing_message(purpose, absent, extra), name=absent[0])


def add_requirement(listed: list[str], module: str, extra: Optional[str] = None) -> None:
    """Add `module`'s requirement to `listed` (a pipeline's meta["requirements"], which `spacy package` makes
    its package's), unless a requirement of that name is listed already."""
    if all(requirement_name(r) != requirement_name(module) for r in listed):
        listed.append(requirement(module, extra))
