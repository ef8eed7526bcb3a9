"""Text from JSONL records: one reader for `spacy elmo embed` and pretraining corpora.

Errors name the file, the line and the missing field, and say which option picks the field.
"""
import json
from pathlib import Path
from typing import Iterable, Iterator, Type, Union


def texts_from_jsonl(
    lines: Iterable[str],
    path: Union[str, Path],
    field: str,
    option: str,
    error: Type[ValueError] = ValueError,
) -> Iterator[str]:
    """The string in `field` of each non-blank line; `option` names the setting that chooses `field`."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{path}, line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict) or field not in record:
            raise error(f"{path}, line {number}: no {field!r} field (set {option})")
        text = record[field]
        if not isinstance(text, str):
            raise error(f"{path}, line {number}: field {field!r} is not a string")
        yield text
