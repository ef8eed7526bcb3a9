"""Reading text for the biLM: files (plain or gzipped), JSONL records, and spaCy's tokenizer.

One home for what `spacy elmo embed` and the pretraining corpora both read, so that a file, a record
or a tokenization rule means the same thing to both. Errors name the file, the line and the option
that chooses what is read.
"""

import gzip
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

PathLike = Union[str, Path]


def open_text(path: Path, errors: str = "replace") -> io.TextIOBase:
    """A UTF-8 text file, gunzipped on the fly when it ends in .gz."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors=errors)
    return open(path, encoding="utf-8", errors=errors)  # the caller closes it


JSONL_SUFFIXES = (".jsonl", ".json")


def detect_format(path: PathLike) -> str:
    """ "jsonl" for a .jsonl/.json file (gzipped or not), else "text": the one rule for every reader that
    is not told the format."""
    return "jsonl" if any(suffix in JSONL_SUFFIXES for suffix in Path(path).suffixes) else "text"


def texts_from_jsonl(
    lines: Iterable[str],
    path: PathLike,
    field: str,
    option: str,
    error: type[ValueError] = ValueError,
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


@dataclass
class Tokenizer:
    """spaCy's tokenizer for a language plus its rule-based sentencizer (no model, no download).

    Built from the language's defaults directly rather than through `spacy.blank`, so that it does
    not load every installed pipeline plugin just to split text; the rules are the same.
    """

    vocab: Any
    tokenizer: Any
    sentencizer: Any
    max_length: int = 1_000_000

    def pipe(self, texts: Iterable[str], batch_size: int = 256) -> Iterator[Any]:
        """Docs with sentence boundaries."""
        return self.sentencizer.pipe(self.tokenizer.pipe(texts, batch_size=batch_size), batch_size=batch_size)

    def words(self, text: str) -> list[str]:
        """The token strings of `text`, whitespace tokens left out."""
        return [t.text for t in self.tokenizer(text) if not t.is_space]


def make_tokenizer(lang: str = "en", option: str = "lang", error: type[ValueError] = ValueError) -> Tokenizer:
    """spaCy's tokenizer for `lang`; `option` names the setting that chose it, for the error."""
    from spacy import util
    from spacy.pipeline import Sentencizer
    from spacy.tokenizer import Tokenizer as SpacyTokenizer
    from spacy.vocab import create_vocab

    try:
        defaults = util.get_lang_class(lang).Defaults
    except ImportError as err:
        raise error(f"{option} is {lang!r}, which spaCy does not know ({err})") from None
    vocab = create_vocab(lang, defaults)

    def compiled(items: Any, compile_regex: Any) -> Any:
        return compile_regex(items) if items else None

    prefix = compiled(defaults.prefixes, util.compile_prefix_regex)
    suffix = compiled(defaults.suffixes, util.compile_suffix_regex)
    infix = compiled(defaults.infixes, util.compile_infix_regex)
    tokenizer = SpacyTokenizer(
        vocab,
        rules=defaults.tokenizer_exceptions,
        prefix_search=prefix.search if prefix else None,
        suffix_search=suffix.search if suffix else None,
        infix_finditer=infix.finditer if infix else None,
        token_match=defaults.token_match,
        url_match=defaults.url_match,
    )
    return Tokenizer(vocab=vocab, tokenizer=tokenizer, sentencizer=Sentencizer())
