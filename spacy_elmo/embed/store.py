"""Where an `embed` run keeps its work, so that a process killed at any instant loses nothing.

`<output>.partial/` holds `binding.json` (model and input by content, the settings that change the numbers)
and a `chunk-<k>.hdf5` per finished chunk, published atomically with its digest. The output is assembled
from the chunks and renamed into place, so it only appears whole, with the bytes of an uninterrupted run.
"""

import contextlib
import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional, Protocol

import numpy

from ..dicts import changed_keys, flatten
from ..disk import atomic_directory, atomic_path, remove_stale_temporaries, same_file
from ..io.files import starts_as_hdf5

FORMAT = "spacy-elmo.embed.v2"
BINDING_FILE = "binding.json"
_CHUNK_FILE = re.compile(r"^chunk-(\d{9})\.hdf5$")
# recorded for people to read, not compared: a model or input moved or renamed is the same content
INFORMATIONAL = ("model.path", "input.path")


class OutputError(ValueError):
    """An output, a partial run or a shard that does not belong with the run asked for, or is damaged."""


class EmbedWarning(UserWarning):
    """What a run did that its user should hear of: a damaged chunk embedded again, an empty input."""


def partial_dir(output: Path) -> Path:
    return output.with_name(f"{output.name}.partial")


def chunk_file(directory: Path, k: int) -> Path:
    return directory / f"chunk-{k:09d}.hdf5"


def differences(recorded: dict[str, Any], current: dict[str, Any], ignore: Iterable[str] = INFORMATIONAL) -> list[str]:
    """'key: recorded then, current now' for every compared key that differs."""
    then, now = flatten(recorded), flatten(current)
    return [
        f"{key}: {then.get(key, '(absent)')!r} then, {now.get(key, '(absent)')!r} now"
        for key in changed_keys(recorded, current, ignore)
    ]


def add_dataset(digest: "hashlib._Hash", name: str, array: numpy.ndarray) -> None:
    array = numpy.ascontiguousarray(array)
    digest.update(json.dumps([name, array.dtype.str, list(array.shape)]).encode("utf-8"))
    digest.update(array.tobytes())


def dataset_digest(items: Iterable[tuple[str, numpy.ndarray]]) -> str:
    """SHA-256 over datasets in the order given: each one's name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name, array in items:
        add_dataset(digest, name, array)
    return digest.hexdigest()


def file_datasets(handle: Any) -> Iterator[tuple[str, numpy.ndarray]]:
    """The datasets of an open output, shard or chunk file in line order."""
    for name in sorted(handle.keys(), key=int):
        yield name, handle[name][...]


def check_digest(
    path: Path, actual: str, recorded: Any, what: str, remedy: str, error: type[OutputError] = OutputError
) -> None:
    """Refuse a file whose datasets' digest is not the one recorded when it was written."""
    if actual != recorded:
        raise error(
            f"{path}: its datasets have SHA-256 {actual}, but the recorded digest is {recorded}: the {what} was "
            f"damaged or edited after it was written; {remedy}"
        )


def write_datasets(path: Path, datasets: Iterable[tuple[str, numpy.ndarray]], **attrs: Any) -> None:
    """Publish an HDF5 file atomically: the datasets in the order given, `attrs`, and their digest."""
    import h5py

    digest = hashlib.sha256()
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as handle:
        for name, array in datasets:
            handle.create_dataset(name, data=array)
            add_dataset(digest, name, array)
        handle.attrs.update(attrs, vectors_sha256=digest.hexdigest(), complete=True)


# what a file given as an output or a shard must be, and what to do when it is not
ROLES = {
    "output": ("OUTPUT exists and is not an embed output", "give another output name"),
    "shard": ("not an embed shard", "give the files that `embed --shard` wrote"),
}


def read_binding(path: Path, what: str = "output") -> dict[str, Any]:
    """The attributes of a finished output or shard (`what`), its binding parsed, or an OutputError saying why
    it is not one; only an HDF5 file is advised to be deleted (anything else is someone's file given by mistake)."""
    import h5py

    is_not, remedy = ROLES[what]
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        if not starts_as_hdf5(path):
            raise OutputError(f"{path}: {is_not} (not HDF5); {remedy}") from None
        raise OutputError(
            f"{path}: an HDF5 file that cannot be read ({err}): if it is a damaged embed {what}, delete it and "
            f"run again; otherwise {remedy}"
        ) from None
    with handle:
        attrs = dict(handle.attrs)
    if attrs.get("format") != FORMAT or "binding" not in attrs:
        raise OutputError(f"{path}: {is_not} of this version (no {FORMAT!r} binding); {remedy}")
    try:
        return {**attrs, "binding": json.loads(attrs["binding"])}
    except (TypeError, ValueError):
        raise OutputError(f"{path}: its recorded binding is damaged; delete it and run again") from None


def check_output_path(output: Path, inputs: Iterable[Path], what: str) -> None:
    """Refuse an output that is a directory or one of the files the run reads, which a write would replace."""
    if output.is_dir():
        raise ValueError(f"{output}: OUTPUT is a directory; give the name of an HDF5 file to write")
    if output.exists() and not output.is_file():  # a FIFO would be opened to read its binding, and wait
        raise ValueError(f"{output}: OUTPUT exists and is not a regular file; give the name of an HDF5 file to write")
    for path in inputs:
        if output.resolve() == path.resolve() or same_file(output, path):
            raise ValueError(f"{output}: OUTPUT is the {what} {path}; give another output name")


class OutputFormat(Protocol):
    """What a finished output is written as: `write` it from the chunks' datasets (in line order), read its
    `record`, compute the `digests` it records from what it holds now, and the `damage_errors` reading a
    damaged one raises."""

    def write(
        self, datasets: Iterator[tuple[str, numpy.ndarray]], binding: dict[str, Any], n_input_lines: int
    ) -> None: ...

    def read_record(self) -> dict[str, Any]: ...

    def digests(self) -> dict[str, str]: ...

    def damage_errors(self) -> tuple[type[Exception], ...]: ...


HDF5_DAMAGE: tuple[type[Exception], ...] = (OSError, KeyError, ValueError)  # what h5py raises on a damaged file


class Hdf5Output:
    """The finished output as one HDF5 file: a dataset a line, the binding and the vectors' digest as attributes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, datasets: Iterator[tuple[str, numpy.ndarray]], binding: dict[str, Any], n_input_lines: int) -> None:
        """Publish it atomically, with its binding and content digest."""
        binding_text = json.dumps(binding, sort_keys=True)
        write_datasets(self.path, datasets, format=FORMAT, binding=binding_text, n_input_lines=n_input_lines)

    def read_record(self) -> dict[str, Any]:
        return read_binding(self.path)

    def digests(self) -> dict[str, str]:
        import h5py

        with h5py.File(self.path, "r") as handle:
            return {"vectors_sha256": dataset_digest(file_datasets(handle))}

    def damage_errors(self) -> tuple[type[Exception], ...]:
        return HDF5_DAMAGE


class PartialRun:
    """The `<output>.partial/` directory of one output: its binding and its finished chunks, assembled at the
    end into `finished` (an output format: `Hdf5Output` unless given another, e.g. `parquet.ParquetOutput`)."""

    def __init__(self, output: Path, binding: dict[str, Any], finished: Optional[OutputFormat] = None) -> None:
        self.output = output
        self.directory = partial_dir(output)
        self.binding = binding
        self.format: OutputFormat = finished if finished is not None else Hdf5Output(output)

    def open(self) -> None:
        """Create the directory (with its binding) or check the binding of the one there."""
        remove_stale_temporaries(self.output)
        if not self.directory.exists():
            with atomic_directory(self.directory) as tmp:
                (tmp / BINDING_FILE).write_text(json.dumps(self.binding, indent=2, sort_keys=True), encoding="utf-8")
            return
        remove_stale_temporaries(self.directory, pattern="*")  # chunks a killed run was writing
        binding_path = self.directory / BINDING_FILE
        try:
            recorded = json.loads(binding_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise OutputError(
                f"{binding_path}: unreadable ({err}); delete {self.directory} to start this output again"
            ) from None
        differ = differences(recorded, self.binding)
        if differ:
            raise OutputError(
                f"{self.output} was started (in {self.directory}) with another model, input or settings: "
                f"{'; '.join(differ)}. Run it again as it was started, or delete {self.directory} to start over"
            )

    def finished_chunks(self) -> set[int]:
        """The chunks whose datasets still have their digest; any other chunk file is removed, with a warning."""
        import h5py

        done = set()
        for path in sorted(self.directory.iterdir()):
            match = _CHUNK_FILE.match(path.name)
            if not match:
                continue
            try:
                with h5py.File(path, "r") as handle:
                    recorded = handle.attrs.get("vectors_sha256")
                    actual = dataset_digest(file_datasets(handle)) if handle.attrs.get("complete", False) else None
            except (OSError, KeyError, ValueError):
                recorded = actual = None
            if actual is not None and actual == recorded:
                done.add(int(match.group(1)))
                continue
            damaged = f"damaged (its datasets have SHA-256 {actual}, written with {recorded or 'no digest'})"
            why = "unreadable" if actual is None else damaged
            warnings.warn(f"{path}: {why}; removed, its lines are embedded again", EmbedWarning, stacklevel=2)
            path.unlink()
        return done

    def finished(self) -> bool:
        """Whether the output is there, finished, undamaged and bound to this binding (then a partial directory
        left by a kill after publishing is removed); an OutputError when it is there and is not."""
        if not self.output.exists():
            return False
        record = self.format.read_record()
        differ = differences(record["binding"], self.binding)
        if differ:
            raise OutputError(
                f"{self.output} already holds a finished output of another model, input or settings: "
                f"{'; '.join(differ)}. Choose another output name, or delete it to embed again"
            )
        try:
            digests = self.format.digests()
        except self.format.damage_errors() as err:
            raise OutputError(f"{self.output}: damaged ({err}); delete it and run again") from None
        for key, actual in digests.items():
            check_digest(self.output, actual, record.get(key), "output", "delete it and run again")
        self.discard()
        return True

    def write_chunk(self, k: int, items: list[tuple[int, numpy.ndarray]]) -> None:
        """Publish chunk k with the digest of its datasets, written in the same atomic write."""
        write_datasets(chunk_file(self.directory, k), ((str(index), array) for index, array in items))

    def _datasets(self, n_chunks: int, expected: list[str]) -> Iterator[tuple[str, numpy.ndarray]]:
        """Every chunk's datasets in line order, each chunk's digest checked once it is read."""
        import h5py

        position = 0
        for k in range(n_chunks):
            path = chunk_file(self.directory, k)
            digest = hashlib.sha256()
            with h5py.File(path, "r") as handle:
                for name, array in file_datasets(handle):
                    want = expected[position] if position < len(expected) else "none"
                    if name != want:
                        raise OutputError(f"{path}: holds line {name} where line {want} belongs; delete it and re-run")
                    position += 1
                    add_dataset(digest, name, array)
                    yield name, array
                recorded = handle.attrs.get("vectors_sha256")
            check_digest(
                path, digest.hexdigest(), recorded, "chunk", "run the same command again: it embeds its lines again"
            )
        if position != len(expected):
            raise OutputError(f"{self.directory}: {len(expected) - position} lines missing; run it again")

    def publish(self, n_chunks: int, expected: list[str], n_input_lines: int) -> None:
        """Assemble the output from the chunks, publish it, then remove the partial directory."""
        self.format.write(self._datasets(n_chunks, expected), self.binding, n_input_lines)
        self.discard()

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.directory)

    def discard_if_unstarted(self) -> None:
        """Remove the directory unless it holds a finished chunk: a run that failed before embedding anything
        leaves no trace, while one stopped after a chunk keeps its work for the re-run that resumes it."""
        with contextlib.suppress(FileNotFoundError):
            if not any(_CHUNK_FILE.match(path.name) for path in self.directory.iterdir()):
                self.discard()
