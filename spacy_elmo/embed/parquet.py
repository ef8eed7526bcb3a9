"""`embed --format parquet`: the output as one Parquet file, one row a line (`line`, `tokens`, `elmo`, see
`columns.py`), with the HDF5 output's guarantees.

The work is kept as the HDF5 output's is (`store.PartialRun`: the binding, each finished chunk published
atomically with its digest, a damaged chunk embedded again); only the last step differs: the chunks are
assembled, in line order and each one's digest checked, into a Parquet file (a row group a chunk) that is
renamed into place, so it appears whole, with the bytes of an uninterrupted run. Its key-value metadata
holds the binding, `content_sha256` (over the vectors, as the HDF5 output's: the two formats of one run
have the same) and `tokens_sha256`, which a re-run checks before it calls the output finished.
"""

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable, Optional

import numpy

from ..io.atomic import atomic_path
from .columns import LINE, TOKENS, VECTORS, column_arrays, tokens_array, vectors_array, vectors_type
from .store import FORMAT, OutputError, PartialRun, add_dataset, check_digest, differences

METADATA_KEY = b"spacy_elmo.embed"
PARQUET_MAGIC = b"PAR1"


def _add_tokens(digest: "hashlib._Hash", name: str, tokens: list[str]) -> None:
    digest.update(json.dumps([name, tokens], ensure_ascii=False).encode("utf-8"))


def parquet_schema(all_layers: bool, n_layers: int, width: int) -> Any:
    import pyarrow

    return pyarrow.schema(
        [
            (LINE, pyarrow.int64()),
            (TOKENS, pyarrow.list_(pyarrow.string())),
            (VECTORS, vectors_type(all_layers, n_layers, width)),
        ]
    )


class ParquetRun(PartialRun):
    """A partial run whose finished output is Parquet: `tokens()` gives the tokens of the output's lines in
    line order (the input read again), `shape` (all layers, L, D) the type of the vectors."""

    def __init__(
        self,
        output: Path,
        binding: dict[str, Any],
        tokens: Callable[[], Iterator[list[str]]],
        shape: tuple[bool, int, int],
        rows_per_group: int,
    ) -> None:
        super().__init__(output, binding)
        self.tokens = tokens
        self.shape = shape
        self.rows_per_group = rows_per_group

    def publish(self, n_chunks: int, expected: list[str], n_input_lines: int) -> None:
        rows = zip(self._datasets(n_chunks, expected), self.tokens())
        write_parquet(self.output, self.binding, rows, n_input_lines, self.shape, self.rows_per_group)
        self.discard()


def write_parquet(
    path: Path,
    binding: dict[str, Any],
    rows: Iterable[tuple[tuple[str, numpy.ndarray], list[str]]],
    n_input_lines: int,
    shape: tuple[bool, int, int],
    rows_per_group: int,
) -> None:
    """Publish a finished Parquet output atomically: ((line, vectors), tokens) rows, with its binding and
    digests in the file's key-value metadata."""
    import pyarrow
    import pyarrow.parquet

    schema = parquet_schema(*shape)
    vectors_digest, tokens_digest = hashlib.sha256(), hashlib.sha256()
    with atomic_path(path) as tmp, pyarrow.parquet.ParquetWriter(tmp, schema) as writer:
        group: list[tuple[tuple[str, numpy.ndarray], list[str]]] = []
        for row in _with_end(rows):
            if row is not None:
                (name, array), tokens = row
                if array.shape[-2] != len(tokens):
                    raise OutputError(
                        f"{path}: line {name} has {array.shape[-2]} vectors but {len(tokens)} tokens now: the input "
                        "changed while it was embedded; run it again"
                    )
                add_dataset(vectors_digest, name, array)
                _add_tokens(tokens_digest, name, tokens)
                group.append(row)
            if group and (row is None or len(group) >= rows_per_group):
                columns = [
                    pyarrow.array([int(name) for (name, _), _ in group], type=pyarrow.int64()),
                    tokens_array([tokens for _, tokens in group]),
                    vectors_array([array for (_, array), _ in group], *shape),
                ]
                writer.write_batch(pyarrow.record_batch(columns, schema=schema), row_group_size=len(group))
                group = []
        recorded = {
            "format": FORMAT,
            "binding": binding,
            "n_input_lines": n_input_lines,
            "content_sha256": vectors_digest.hexdigest(),
            "tokens_sha256": tokens_digest.hexdigest(),
        }
        writer.add_key_value_metadata({METADATA_KEY: json.dumps(recorded, sort_keys=True).encode("utf-8")})


def _with_end(rows: Iterable[Any]) -> Iterator[Any]:
    yield from rows
    yield None


def read_parquet_record(path: Path) -> dict[str, Any]:
    """What a finished Parquet output records of itself, or an OutputError saying why it is not one."""
    import pyarrow
    import pyarrow.parquet

    try:
        with open(path, "rb") as raw:
            is_parquet = raw.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError as err:
        raise OutputError(f"{path}: cannot be read ({err})") from None
    if not is_parquet:
        raise OutputError(f"{path}: OUTPUT exists and is not an embed output (not Parquet); give another output name")
    try:
        metadata = pyarrow.parquet.ParquetFile(path).metadata.metadata or {}
    except (OSError, pyarrow.ArrowException) as err:
        raise OutputError(
            f"{path}: a Parquet file that cannot be read ({err}): if it is a damaged embed output, delete it and "
            "run again; otherwise give another output name"
        ) from None
    try:
        record = json.loads(metadata[METADATA_KEY])
    except KeyError:
        raise OutputError(
            f"{path}: OUTPUT exists and is not an embed output of this version (no {FORMAT!r} binding); "
            "give another output name"
        ) from None
    except ValueError:
        raise OutputError(f"{path}: its recorded binding is damaged; delete it and run again") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or "binding" not in record:
        raise OutputError(f"{path}: OUTPUT exists and is not an embed output of this version; give another output name")
    return record


def parquet_digests(path: Path) -> tuple[str, str]:
    """(content_sha256, tokens_sha256) of a Parquet output's rows, read one row group at a time."""
    import pyarrow.parquet

    vectors_digest, tokens_digest = hashlib.sha256(), hashlib.sha256()
    handle = pyarrow.parquet.ParquetFile(path)
    for group in range(handle.num_row_groups):
        table = handle.read_row_group(group, columns=[LINE, TOKENS, VECTORS])
        lines, tokens = table.column(LINE).to_pylist(), table.column(TOKENS).to_pylist()
        for line, row_tokens, array in zip(lines, tokens, column_arrays(table.column(VECTORS))):
            add_dataset(vectors_digest, str(line), array)
            _add_tokens(tokens_digest, str(line), row_tokens)
    return vectors_digest.hexdigest(), tokens_digest.hexdigest()


def finished_parquet(output: Path, binding: dict[str, Any]) -> Optional[bool]:
    """`store.finished_output` for a Parquet output: None when there is none; True when it is finished,
    undamaged and bound to `binding` (a partial directory left by a kill after publishing is removed);
    otherwise an OutputError."""
    import pyarrow

    if not output.exists():
        return None
    record = read_parquet_record(output)
    differ = differences(record["binding"], binding)
    if differ:
        raise OutputError(
            f"{output} already holds a finished output of another model, input or settings: {'; '.join(differ)}. "
            "Choose another output name, or delete it to embed again"
        )
    try:
        vectors, tokens = parquet_digests(output)
    except (OSError, KeyError, ValueError, pyarrow.ArrowException) as err:
        raise OutputError(f"{output}: damaged ({err}); delete it and run again") from None
    check_digest(output, vectors, record.get("content_sha256"), "output", "delete it and run again")
    check_digest(output, tokens, record.get("tokens_sha256"), "output", "delete it and run again")
    PartialRun(output, binding).discard()
    return True
