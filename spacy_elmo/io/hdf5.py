"""The bilm-tf/AllenNLP file format: `options.json` + one HDF5 file (+ `vocab.txt`), read and written,
each dataset checked as it is read. It records no checksum: only a pinned model digest catches an edit, and
it is checked before the weights are parsed.
"""

import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Optional, Union

import numpy

from ..bilm.bilm import BiLM
from ..bilm.options import BiLMOptions
from ..disk import OPTIONS_FILE, PathLike, atomic_path, atomic_write_text
from ..errors import reading
from .archive import JSON_LIMIT, VOCAB_MEMBER, WEIGHT_MEMBERS, WEIGHTS_LIMIT, WEIGHTS_SLACK, Limit, bilm_tf_weights
from .arrays import WeightsError, bilm_arrays, build_bilm, check_accounted_for, expected_shapes
from .damage import damaged_as
from .digest import ModelFile
from .files import ModelFiles
from .formats import Container, Format, LoadedModel, ModelSource, digested
from .native import MODEL_FILE

if TYPE_CHECKING:
    import h5py


REMEDY = ": copy or download it again"


def _read_dataset(handle: "h5py.File", name: str, shape: tuple[int, ...], path: str) -> numpy.ndarray:
    """One dataset, checked; h5py's errors on damaged internals (opening it, its shape, its bytes) name it."""
    import h5py

    with damaged_as(WeightsError, path, f"dataset '{name}' cannot be read, the file is truncated or corrupt", REMEDY):
        if name not in handle:
            raise WeightsError(f"{path}: missing dataset '{name}' (expected shape {shape} from the options)")
        dataset = handle[name]
        if not isinstance(dataset, h5py.Dataset):
            raise WeightsError(f"{path}: '{name}' is a group, expected a dataset of shape {shape}")
        if tuple(dataset.shape) != tuple(shape):
            raise WeightsError(
                f"{path}: dataset '{name}' has shape {tuple(dataset.shape)}, but the options imply {shape}; "
                "are the options.json and the weight file from the same model?"
            )
        data = dataset[...]
    if not numpy.issubdtype(data.dtype, numpy.floating):
        raise WeightsError(f"{path}: dataset '{name}' has dtype {data.dtype}, expected floating point")
    return data.astype(numpy.float32, copy=False)


def _open_hdf5(path: Path, mode: str = "r", data: Optional[BinaryIO] = None) -> "h5py.File":
    """`path` opened with h5py; with `data`, that file object is read instead (`path` then only names it)."""
    import h5py

    if data is None and mode == "r" and not path.exists():
        raise FileNotFoundError(f"weight file not found: {path}")
    with damaged_as(WeightsError, str(path), "not a readable HDF5 weight file"):
        return h5py.File(data if data is not None else path, mode)


def load_bilm_tf(options_file: PathLike, weight_file: PathLike, vocab_file: Optional[PathLike] = None) -> BiLM:
    """A BiLM from bilm-tf/AllenNLP `options.json` + HDF5 weights (+ softmax and vocabulary if present),
    without the digests `load_model` adds."""
    vocab_name = str(vocab_file) if vocab_file is not None else None
    return _read_bilm_tf(ModelFiles(Path()), str(options_file), str(weight_file), vocab_name)


def _read_bilm_tf(files: ModelFiles, options_name: str, weights_name: str, vocab_name: Optional[str]) -> BiLM:
    """A BiLM from a container's files; a weight file inside an archive is read within `weights_limit`."""
    with reading(files.where(options_name)):
        options = BiLMOptions.from_bytes(files.read(options_name, JSON_LIMIT))
    vocab = parse_vocab(files.read(vocab_name).decode("utf-8")) if vocab_name is not None else None
    weight_path, source = files.path(weights_name), files.where(weights_name)
    data = io.BytesIO(files.read(weights_name, weights_limit(options, options_name))) if weight_path is None else None
    # the whole read, its close included: damaged internals fail anywhere (iterating a symbol table, opening
    # an object), each refused naming the file (a dataset's read, naming the dataset too)
    damaged = damaged_as(WeightsError, source, "the HDF5 file is damaged and cannot be read", REMEDY)
    with reading(source), damaged, _open_hdf5(weight_path or Path(source), data=data) as handle:
        check_accounted_for(_dataset_names(handle), options)
        shapes = expected_shapes(options, handle["softmax/W"].shape[0] if "softmax/W" in handle else None)
        arrays = {name: _read_dataset(handle, name, shape, source) for name, shape in shapes.items()}
    with reading(source):
        return build_bilm(options, arrays, vocab=vocab)


class BilmTfFormat(Format):
    """options.json and one HDF5 weight file (+ vocab.txt): in a directory, a zip archive, or a weight file
    given with options.json beside it (or `--options`)."""

    name = "bilm-tf"

    def recognise(self, container: Container) -> ModelSource:
        """The last format tried: a container that holds no bilm-tf model is refused here, saying what it needs."""
        target = container.path
        if container.files.zipped:
            roles = {"options": OPTIONS_FILE, "weights": bilm_tf_weights(target, container.members)}
            roles.update({"vocab": VOCAB_MEMBER} if VOCAB_MEMBER in container.members else {})
            return ModelSource(self, target, container.files, roles)
        weight_file = target  # or, in a directory, the one weight file there
        if target.is_dir():
            found = [target / n for n in WEIGHT_MEMBERS if (target / n).exists()]
            if len(found) > 1:
                raise ValueError(
                    f"{target}: holds {len(found)} weight files ({', '.join(p.name for p in found)}); which "
                    f"one is the model's cannot be chosen: give the .hdf5 file you mean (e.g. {found[0]}; the "
                    f"{OPTIONS_FILE} beside it is read)"
                )
            found = found or sorted(target.glob("*.hdf5")) + sorted(target.glob("*.h5"))
            if len(found) != 1:
                raise FileNotFoundError(
                    f"{target}: expected a native model ({MODEL_FILE}), a weight file named one of "
                    f"{WEIGHT_MEMBERS}, or exactly one .hdf5 file beside options.json; found {len(found)}"
                )
            weight_file = found[0]
        options = container.options_file or weight_file.with_name(OPTIONS_FILE)
        vocab = weight_file.with_name(VOCAB_MEMBER)
        roles = {"options": str(options), "weights": str(weight_file)}
        roles.update({"vocab": str(vocab)} if vocab.exists() else {})
        return ModelSource(self, target, ModelFiles(Path()), roles)  # each file named by its path as given

    def model_files(self, source: ModelSource) -> list[ModelFile]:
        """Each file hashed as stored (in an archive, the weights within what the options describe)."""
        files, roles, limit = source.files, source.roles, None
        if files.zipped:
            with reading(files.where(roles["options"])):
                options = BiLMOptions.from_bytes(files.read(roles["options"]))
            limit = weights_limit(options, roles["options"])
        return [
            ModelFile(role, files.where(name), files.sha256(name, limit if role == "weights" else None))
            for role, name in roles.items()
        ]

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        roles = source.roles
        bilm = _read_bilm_tf(source.files, roles["options"], roles["weights"], roles.get("vocab"))
        return digested(bilm, source, files)

    def origin(self, loaded: LoadedModel) -> tuple[str, str]:
        """The weight file's name and its own SHA-256."""
        return loaded.source.weight_file.name, next(file.sha256 for file in loaded.files if file.role == "weights")


BILM_TF = BilmTfFormat()


def _dataset_names(handle: "h5py.File") -> list[str]:
    """Every dataset's name; one that does not decode (a damaged name) as Python shows undecodable bytes, so it
    is refused as an array the options do not describe, named."""
    import h5py

    names: list[str] = []

    def visit(name: Union[str, bytes], item: object) -> None:
        if isinstance(item, h5py.Dataset):
            names.append(name if isinstance(name, str) else name.decode("utf-8", "backslashreplace"))

    handle.visititems(visit)
    return names


def weights_limit(options: BiLMOptions, options_name: str) -> Limit:
    """What a weight file can need: 8 bytes (float64) per weight the options describe, softmax included, and
    `WEIGHTS_SLACK`; never more than `WEIGHTS_LIMIT`."""
    n_weights = sum(math.prod(shape) for shape in expected_shapes(options, options.n_tokens_vocab).values())
    size = 8 * n_weights + WEIGHTS_SLACK
    if size >= WEIGHTS_LIMIT.size:
        return WEIGHTS_LIMIT
    return Limit(size, f"the {n_weights} weights {options_name} describes (8 bytes each at most, and 16 MiB)")


def save_bilm_tf(
    bilm: BiLM,
    options_file: PathLike,
    weight_file: PathLike,
    vocab_file: Optional[PathLike] = None,
    converted_from: Optional[dict[str, str]] = None,
) -> None:
    """Write options.json + HDF5 in the reference layout (+ vocabulary); `converted_from` goes into attributes
    that bilm-tf and AllenNLP ignore. A model the layout cannot hold (ELMoForManyLangs features) is refused."""
    if not bilm.options.bilm_tf_layout:  # refused before anything is written
        raise WeightsError(
            "the bilm-tf/AllenNLP layout cannot hold this model (a character or word vocabulary of its own, "
            "or AllenNLP's highway/LSTM parametrisation, as ELMoForManyLangs models have): keep it native"
        )
    with atomic_path(weight_file) as tmp, _open_hdf5(tmp, "w") as handle:
        for name, value in bilm_arrays(bilm):
            handle.create_dataset(name, data=value, dtype="float32")
        for key, recorded in (converted_from or {}).items():
            handle.attrs[f"spacy_elmo_source_{key}"] = str(recorded)
    atomic_write_text(options_file, json.dumps(bilm.options.to_dict(), indent=2) + "\n")
    if vocab_file is not None and bilm.vocab is not None:
        write_vocab(bilm.vocab, vocab_file)


def read_vocab(path: PathLike) -> list[str]:
    """A vocabulary file (`vocab.txt`): one word a line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    return parse_vocab(path.read_text(encoding="utf-8"))


def parse_vocab(text: str) -> list[str]:
    """One word a line, lines ended as Python's text files end them (LF, CR LF or CR)."""
    words = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if words and words[-1] == "":
        words.pop()
    return words


def write_vocab(words: list[str], path: PathLike) -> None:
    atomic_write_text(path, "".join(f"{w}\n" for w in words))
