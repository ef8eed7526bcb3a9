"""What an exported graph says about itself, so that the `.onnx` file alone is a servable model.

`spacy elmo export` writes the biLM's options and (for ELMoForManyLangs models) its lexicon into the
graph's metadata: how words become the ids the graph reads, and the dims of what it returns. A runtime
needs nothing else, and no torch, to serve it. Plain strings (JSON) under `spacy_elmo.*` keys, read back
through ONNX Runtime's model metadata (no `onnx` package needed to serve).
"""

import json
from dataclasses import dataclass
from typing import Optional

from ..bilm.lexicon import Lexicon, LexiconError
from ..bilm.options import BiLMOptions

FORMAT = "spacy-elmo.onnx.v1"
FORMAT_KEY = "spacy_elmo.format"
OPTIONS_KEY = "spacy_elmo.options"
LEXICON_KEY = "spacy_elmo.lexicon"
SOURCE_SHA256_KEY = "spacy_elmo.source_sha256"
VERSION_KEY = "spacy_elmo.version"


class OnnxModelError(ValueError):
    """An .onnx file that is not a graph `spacy elmo export` wrote, or one that is damaged."""


@dataclass(frozen=True)
class GraphMetadata:
    """options: the biLM's (dims, ids); lexicon: its vocabularies (None: bilm-tf byte ids);
    source_sha256: the digest of the model it was exported from, as `spacy elmo verify` prints it."""

    options: BiLMOptions
    lexicon: Optional[Lexicon]
    source_sha256: Optional[str]

    def to_strings(self) -> dict[str, str]:
        from ..about import __version__

        strings = {
            FORMAT_KEY: FORMAT,
            OPTIONS_KEY: json.dumps(self.options.to_dict(), sort_keys=True),
            VERSION_KEY: __version__,
        }
        if self.lexicon is not None:
            strings[LEXICON_KEY] = json.dumps(self.lexicon.to_dict(), ensure_ascii=False)
        if self.source_sha256 is not None:
            strings[SOURCE_SHA256_KEY] = self.source_sha256
        return strings

    @classmethod
    def from_strings(cls, strings: dict[str, str], source: str) -> "GraphMetadata":
        found = strings.get(FORMAT_KEY)
        if found != FORMAT:
            what = "records no spacy-elmo metadata" if found is None else f"is in format {found!r}"
            raise OnnxModelError(
                f"{source}: the ONNX graph {what}, expected {FORMAT!r}: serve graphs written by "
                "`python -m spacy_elmo export MODEL out.onnx` (they carry the options and vocabularies the "
                "runtime needs)"
            )
        try:
            options = BiLMOptions.from_dict(json.loads(strings[OPTIONS_KEY]), source=f"{source} ({OPTIONS_KEY})")
            lexicon_json = strings.get(LEXICON_KEY)
            lexicon = Lexicon.from_dict(json.loads(lexicon_json), source) if lexicon_json is not None else None
        except (KeyError, json.JSONDecodeError, LexiconError) as err:
            raise OnnxModelError(f"{source}: the ONNX graph's spacy-elmo metadata is damaged ({err})") from None
        return cls(options, lexicon, strings.get(SOURCE_SHA256_KEY))
