"""`embed --format parquet`: one row a line (`line`, `tokens`, `elmo`, see `columns.py`), with the HDF5
output's guarantees: the work is kept as `store.PartialRun` keeps it, and only the finished output differs
(`ParquetOutput`: the chunks assembled into a Parquet file, a row group a chunk). Its metadata holds the
binding, `vectors_sha256` (the HDF5 output's, over the vectors) and `tokens_sha256`, which a re-run checks.
"""

import hashlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import numpy

from ..disk import atomic_path
from .columns import LINE, TOKENS, VECTORS, column_arrays, tokens_array, vectors_array, vectors_type
from .store import FORMAT, HDF5_DAMAGE, ROLES, OutputError, add_dataset

METADATA_KEY = b"spacy_elmo.embed"
PARQUET_MAGIC = b"PAR1"


def _add_tokens(digest: "hashlib._Hash", name: str, tokens: list[str]) -> None:
    digest.update(json.dumps([name, tokens], ensure_ascii=False).encode("utf-8"))


class ParquetOutput:
    """The finished output as Parquet (a `store.OutputFormat`): `tokens()` gives the tokens of its lines (the
    input read again), `shape` (all layers, L, D) the type of the vectors."""

    def __init__(
        self, path: Path, tokens: Callable[[], Iterator[list[str]]], shape: tuple[bool, int, int], rows_per_group: int
    ) -> None:
        self.path = path
        self.tokens = tokens
        self.shape = shape
        self.rows_per_group = rows_per_group

    def write(self, datasets: Iterator[tuple[str, numpy.ndarray]], binding: dict[str, Any], n_input_lines: int) -> None:
        import pyarrow
        import pyarrow.parquet

        schema = pyarrow.schema(
            [
                (LINE, pyarrow.int64()),
                (TOKENS, pyarrow.list_(pyarrow.string())),
                (VECTORS, vectors_type(*self.shape)),
            ]
        )
        rows = zip(datasets, self.tokens())
        vectors_digest, tokens_digest = hashlib.sha256(), hashlib.sha256()
        with atomic_path(self.path) as tmp, pyarrow.parquet.ParquetWriter(tmp, schema) as writer:
            while group := list(itertools.islice(rows, self.rows_per_group)):
                for (name, array), tokens in group:
                    if array.shape[-2] != len(tokens):
                        raise OutputError(
                            f"{self.path}: line {name} has {array.shape[-2]} vectors but {len(tokens)} tokens now: "
                            "the input changed while it was embedded; run it again"
                        )
                    add_dataset(vectors_digest, name, array)
                    _add_tokens(tokens_digest, name, tokens)
                columns = [
                    pyarrow.array([int(name) for (name, _), _ in group], type=pyarrow.int64()),
                    tokens_array([tokens for _, tokens in group]),
                    vectors_array([array for (_, array), _ in group], *self.shape),
                ]
                writer.write_batch(pyarrow.record_batch(columns, schema=schema), row_group_size=len(group))
            recorded = {
                "format": FORMAT,
                "binding": binding,
                "n_input_lines": n_input_lines,
                "vectors_sha256": vectors_digest.hexdigest(),
                "tokens_sha256": tokens_digest.hexdigest(),
            }
            writer.add_key_value_metadata({METADATA_KEY: json.dumps(recorded, sort_keys=True).encode("utf-8")})

    def read_record(self) -> dict[str, Any]:
        """What the finished output records of itself, or an OutputError saying why it is not one."""
        import pyarrow
        import pyarrow.parquet

        path, (is_not, remedy) = self.path, ROLES["output"]
        try:
            with open(path, "rb") as raw:
                is_parquet = raw.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
        except OSError as err:
            raise OutputError(f"{path}: cannot be read ({err})") from None
        if not is_parquet:
            raise OutputError(f"{path}: {is_not} (not Parquet); {remedy}")
        try:
            metadata = pyarrow.parquet.ParquetFile(path).metadata.metadata or {}
        except (OSError, pyarrow.ArrowException) as err:
            raise OutputError(
                f"{path}: a Parquet file that cannot be read ({err}): if it is a damaged embed output, delete it and "
                f"run again; otherwise {remedy}"
            ) from None
        try:
            record = json.loads(metadata[METADATA_KEY])
        except KeyError:
            raise OutputError(f"{path}: {is_not} of this version (no {FORMAT!r} binding); {remedy}") from None
        except ValueError:
            raise OutputError(f"{path}: its recorded binding is damaged; delete it and run again") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT or "binding" not in record:
            raise OutputError(f"{path}: {is_not} of this version; {remedy}")
        return record

    def digests(self) -> dict[str, str]:
        """The vectors' and tokens' digests of the rows, read one row group at a time."""
        import pyarrow.parquet

        vectors_digest, tokens_digest = hashlib.sha256(), hashlib.sha256()
        handle = pyarrow.parquet.ParquetFile(self.path)
        for group in range(handle.num_row_groups):
            table = handle.read_row_group(group, columns=[LINE, TOKENS, VECTORS])
            lines, tokens = table.column(LINE).to_pylist(), table.column(TOKENS).to_pylist()
            for line, row_tokens, array in zip(lines, tokens, column_arrays(table.column(VECTORS))):
                add_dataset(vectors_digest, str(line), array)
                _add_tokens(tokens_digest, str(line), row_tokens)
        return {"vectors_sha256": vectors_digest.hexdigest(), "tokens_sha256": tokens_digest.hexdigest()}

    def damage_errors(self) -> tuple[type[Exception], ...]:
        import pyarrow

        return (*HDF5_DAMAGE, pyarrow.ArrowException)
