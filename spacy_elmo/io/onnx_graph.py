"""What an exported graph says about itself, so that the `.onnx` file alone is a servable model: the biLM's
options and lexicon as JSON under `spacy_elmo.*` metadata keys (read from its bytes: no torch, no `onnx`, no
session), and the SHA-256 of its own bytes, which its format requires, so a damaged weight is refused at load.
The ModelProto's top-level fields are walked in protobuf's wire format. This is no security: a pin is.
"""

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..bilm.lexicon import AnyLexicon, Lexicon, read_lexicon
from ..bilm.options import FILE_KEYS, BiLMOptions
from ..errors import ModelFileError
from .protobuf import field_values, fields, signed64

FORMAT = "spacy-elmo.onnx.v2"  # what export writes: records GRAPH_SHA256_KEY, which loading then requires
FORMAT_KEY = "spacy_elmo.format"
OPTIONS_KEY = "spacy_elmo.options"
LEXICON_KEY = "spacy_elmo.lexicon"
SOURCE_SHA256_KEY = "spacy_elmo.source_sha256"
VERSION_KEY = "spacy_elmo.version"
GRAPH_SHA256_KEY = "spacy_elmo.graph_sha256"
ONNX_SUFFIX = ".onnx"
INPUT_NAME, OUTPUT_NAME = "char_ids", "layers"  # the graph's one input (ids) and one output (layers)
EXPORT_AGAIN = "export it again (`python -m spacy_elmo export`)"

_METADATA_PROPS = 14  # ModelProto.metadata_props: repeated StringStringEntryProto {key = 1; value = 2}


def names_onnx_graph(path: str) -> bool:
    """Whether a configured path names an .onnx graph (which only the onnxruntime runtime serves)."""
    return path.lower().endswith(ONNX_SUFFIX)


class OnnxModelError(ModelFileError):
    """An .onnx file that is not a graph `spacy elmo export` wrote, or one that is damaged."""


@dataclass(frozen=True)
class GraphMetadata:
    """source_sha256: the digest of the model it was exported from. A byte lexicon is recorded as no entry."""

    options: BiLMOptions
    lexicon: AnyLexicon
    source_sha256: Optional[str]

    def to_strings(self) -> dict[str, str]:
        from ..about import __version__

        strings = {
            FORMAT_KEY: FORMAT,
            OPTIONS_KEY: json.dumps(self.options.to_dict(), sort_keys=True),
            VERSION_KEY: __version__,
        }
        vocabularies = self.lexicon.to_dict()  # none for a byte lexicon
        if vocabularies is not None:
            strings[LEXICON_KEY] = json.dumps(vocabularies, ensure_ascii=False)
        if self.source_sha256 is not None:
            strings[SOURCE_SHA256_KEY] = self.source_sha256
        return strings

    @classmethod
    def from_strings(cls, strings: dict[str, str]) -> "GraphMetadata":
        found = strings.get(FORMAT_KEY)
        if found != FORMAT:
            what = "records no spacy-elmo metadata" if found is None else f"is in format {found!r}"
            raise OnnxModelError(
                f"the ONNX graph {what}, expected {FORMAT!r}: serve graphs written by "
                "`python -m spacy_elmo export MODEL out.onnx` (they carry the options and vocabularies the "
                "runtime needs)"
            )
        key = OPTIONS_KEY  # the entry being read, for the message
        try:
            options = BiLMOptions.from_dict(json.loads(strings[OPTIONS_KEY]))
            key = LEXICON_KEY
            lexicon = read_lexicon(json.loads(strings.get(LEXICON_KEY, "null")), options.max_characters_per_token)
        except (KeyError, json.JSONDecodeError, ModelFileError) as err:
            raise OnnxModelError(f"the ONNX graph's spacy-elmo metadata is damaged at {key} ({err})") from None
        return cls(options, lexicon, strings.get(SOURCE_SHA256_KEY))

    def check_shapes(self, input_shape: Sequence[Any], output_shape: Sequence[Any]) -> None:
        """Refuse metadata that disagrees with the shapes the graph declares for its input (B, T, width) and
        output (L+1, B, T, 2P), naming the key (the caller names the graph: `errors.reading`)."""
        o, lexicon = self.options, self.lexicon
        width_key = f"{OPTIONS_KEY} {FILE_KEYS['max_characters_per_token']}"
        if lexicon.max_characters_per_token != o.max_characters_per_token:
            raise OnnxModelError(
                f"{width_key} = {o.max_characters_per_token} but {LEXICON_KEY} max_characters_per_token "
                f"= {lexicon.max_characters_per_token}; the graph's metadata was edited"
            )
        if len(input_shape) != 3 or len(output_shape) != 4:
            raise OnnxModelError(
                f"the graph's input has shape {list(input_shape)} and its output {list(output_shape)}; a "
                "spacy-elmo graph takes (batch, length, width) ids and returns (layers, batch, length, 2P) layers"
            )
        if isinstance(lexicon, Lexicon):
            width_key = f"{LEXICON_KEY} max_characters_per_token" + (" (+1: a word id)" if lexicon.words else "")
        layers_key, projection_key = (f"{OPTIONS_KEY} {FILE_KEYS[name]}" for name in ("n_layers", "projection_dim"))
        stated = (  # (key, its value, what in the graph, the graph's dim, the dim the value implies)
            (width_key, o.max_characters_per_token, "input's last dim", input_shape[-1], lexicon.width),
            (layers_key, o.n_layers, "output's first dim", output_shape[0], o.n_layers + 1),
            (projection_key, o.projection_dim, "output's last dim", output_shape[-1], o.output_dim),
        )
        for key, value, what, declared, implied in stated:
            if isinstance(declared, int) and declared != implied:  # a named (dynamic) dim states nothing
                raise OnnxModelError(
                    f"{key} = {value} disagrees with the graph, whose {what} is {declared} (not "
                    f"{implied}); the graph's metadata was edited or comes from another graph"
                )


# ModelProto's top-level fields: number -> wire type (0 varint, 2 length-delimited)
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2}
_IR_VERSION, _GRAPH = 1, 7
_GRAPH_INPUT, _GRAPH_OUTPUT = 11, 12  # GraphProto's repeated ValueInfoProto fields
_MAX_MODEL_FIELDS = 4096  # an exported graph has a dozen top-level fields (its metadata among them)


def is_model_proto(data: memoryview) -> bool:
    """Whether `data` is an ONNX ModelProto: an ir_version first, a graph, and only ModelProto's fields (read
    by their headers alone, so a memory-mapped file costs a few pages)."""
    seen: set[int] = set()
    try:
        for count, (number, wire_type, _, _, _) in enumerate(fields(data)):
            first_is_ir_version = seen or number == _IR_VERSION
            if count >= _MAX_MODEL_FIELDS or _MODEL_FIELDS.get(number) != wire_type or not first_is_ir_version:
                return False
            seen.add(number)
    except ValueError:
        return False
    return _GRAPH in seen


def _top_fields(graph: bytes) -> Iterator[tuple[memoryview, Optional[tuple[str, str]]]]:
    """Each top-level field's bytes, and its (key, value) where it is a metadata_props entry."""
    data = memoryview(graph)
    try:
        for number, _, start, end, payload in fields(data):
            entry = None
            if number == _METADATA_PROPS:
                parts = {key: bytes(value) for key, _, _, _, value in fields(payload)}  # key = 1, value = 2
                entry = (parts.get(1, b"").decode("utf-8"), parts.get(2, b"").decode("utf-8"))
            yield data[start:end], entry
    except ValueError as err:  # UnicodeDecodeError included
        raise OnnxModelError(f"not a readable ONNX graph ({err})") from None


def graph_sha256(graph: bytes) -> tuple[str, Optional[str]]:
    """(the SHA-256 of the graph's bytes without its `GRAPH_SHA256_KEY` entry, the digest that entry
    records, or None for a graph without one)."""
    digest = hashlib.sha256()
    recorded: Optional[str] = None
    for field, entry in _top_fields(graph):
        if entry is not None and entry[0] == GRAPH_SHA256_KEY:
            recorded = entry[1]
        else:
            digest.update(field)
    return digest.hexdigest(), recorded


def metadata_strings(graph: bytes) -> dict[str, str]:
    """The graph's metadata_props (what ONNX Runtime's `custom_metadata_map` says), read from its bytes."""
    return {entry[0]: entry[1] for _, entry in _top_fields(graph) if entry is not None}


Dim = Union[int, str, None]  # a declared dimension: its size, its name (a dynamic one), or neither


def _first(message: memoryview, number: int) -> memoryview:
    """The payload of the message's first length-delimited field `number` (empty where there is none)."""
    return next((payload for n, _, _, _, payload in fields(message) if n == number), memoryview(b""))


def _value_infos(graph_proto: memoryview, number: int) -> list[tuple[str, list[Dim]]]:
    """The (name, declared shape) of each ValueInfoProto in GraphProto field `number` (11 input, 12 output):
    name = 1, type = 2 -> TypeProto.tensor_type = 1 -> shape = 2 -> dim = 1 {dim_value = 1, dim_param = 2}."""
    infos = []
    for n, _, _, _, info in fields(graph_proto):
        if n == number:
            dims: list[Dim] = []
            for m, dim in field_values(_first(_first(_first(info, 2), 1), 2)):
                if m == 1:
                    values = dict(field_values(dim))  # type: ignore[arg-type]
                    size, name = values.get(1), values.get(2)
                    dims.append(
                        signed64(size) if isinstance(size, int) else None if name is None else bytes(name).decode()
                    )
            infos.append((bytes(_first(info, 1)).decode(), dims))
    return infos


def declared_values(graph: bytes) -> tuple[list[tuple[str, list[Dim]]], list[tuple[str, list[Dim]]]]:
    """The graph's inputs and outputs, each (name, declared shape), as ONNX Runtime's `get_inputs()` and
    `get_outputs()` give them (a dim's size, its name, or None)."""
    try:
        graph_proto = _first(memoryview(graph), _GRAPH)
        return _value_infos(graph_proto, _GRAPH_INPUT), _value_infos(graph_proto, _GRAPH_OUTPUT)
    except ValueError as err:  # UnicodeDecodeError included
        raise OnnxModelError(f"not a readable ONNX graph ({err})") from None


def read_graph(graph: bytes) -> GraphMetadata:
    """What a graph `spacy elmo export` wrote says of itself, every part checked from its bytes (no session):
    its metadata, its one input and one output by name and declared shape, and the digest it records of
    itself (the caller names the graph: `errors.reading`)."""
    metadata = GraphMetadata.from_strings(metadata_strings(graph))
    inputs, outputs = declared_values(graph)
    if [name for name, _ in inputs] != [INPUT_NAME] or [name for name, _ in outputs] != [OUTPUT_NAME]:
        raise OnnxModelError(
            f"the graph takes {[name for name, _ in inputs]} and returns {[name for name, _ in outputs]}; a "
            f"spacy-elmo graph takes [{INPUT_NAME!r}] and returns [{OUTPUT_NAME!r}]"
        )
    metadata.check_shapes(inputs[0][1], outputs[0][1])
    check_graph_sha256(graph)
    return metadata


def check_graph_sha256(graph: bytes) -> None:
    """Refuse a graph whose bytes are not those its recorded digest was taken of (a damaged weight, an
    edited metadata entry), or one that records none (its entry deleted)."""
    actual, recorded = graph_sha256(graph)
    if recorded is None:
        raise OnnxModelError(
            f"the ONNX graph is in format {FORMAT!r} ({FORMAT_KEY}), which records the digest of "
            f"its content, and its {GRAPH_SHA256_KEY} entry is missing: the file was edited or damaged"
        )
    if actual != recorded:
        raise OnnxModelError(
            f"the ONNX graph's content has SHA-256 {actual}, not the {recorded} recorded in it "
            f"({GRAPH_SHA256_KEY}) when it was exported: the file is damaged or was edited"
        )
