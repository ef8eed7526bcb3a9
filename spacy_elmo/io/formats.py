"""A model format as an object: whether a container holds a model of it (`recognise`), the files a pin
covers (`model_files`, hashed before any weights are parsed) and how it is read (`read`). `load_model`
tries `resolve.FORMATS` in order, so a new format is a module and a line there.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..bilm.bilm import BiLM
from ..bilm.options import BiLMOptions
from .digest import ModelFile, model_digest
from .files import ModelFiles


@dataclass(frozen=True)
class Container:
    """What a model path resolved to: `path` (a directory, a zip archive or a file), its `files` (an archive's:
    its model folder, `members` {name there: member}) and the options file the user gave."""

    path: Path
    files: ModelFiles
    members: dict[str, str]
    options_file: Optional[Path] = None


@dataclass(frozen=True)
class ModelSource:
    """One model: its format, its container (`path` is what the user gave) and, by role, the names there of
    the files it reads; `parsed`: what `model_files` parsed that `read` reuses (a TF-Hub module's index)."""

    format: "Format"
    path: Path
    files: ModelFiles
    roles: dict[str, str]
    parsed: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def kind(self) -> str:
        """The format's name, as messages, `describe()` and a converted model's record say it."""
        return self.format.name

    @property
    def options_file(self) -> Path:
        return Path(self.files.where(self.roles["options"]))

    @property
    def weight_file(self) -> Path:
        return Path(self.files.where(self.roles["weights"]))

    def read_files(self) -> list[ModelFile]:
        """The files reading read, by role (sorted; without roles, every file read, by name), each with the
        SHA-256 of the very bytes read."""
        read = self.files.digests
        roles = sorted(self.roles.items()) or [(name, name) for name in sorted(read)]
        return [ModelFile(role, self.files.where(name), read[name]) for role, name in roles if name in read]


@dataclass(frozen=True)
class LoadedModel:
    """A biLM and what it was loaded from: `sha256` is the model's one digest, `sha256_of` what it covers,
    `files` the files it is made of, each with its own SHA-256."""

    bilm: BiLM
    source: ModelSource
    sha256: str
    sha256_of: str
    files: tuple[ModelFile, ...] = ()
    converted_from: Optional[dict[str, Any]] = None

    @property
    def options(self) -> BiLMOptions:
        return self.bilm.options

    def describe(self) -> dict[str, Any]:
        """What an output records of its model."""
        return {"path": str(self.source.path), "format": self.source.kind, "sha256": self.sha256}

    def provenance(self) -> dict[str, str]:
        """What a model converted from this one records of it: its format, a file and a digest (`Format.origin`)."""
        name, sha256 = self.source.format.origin(self)
        return {"format": self.source.kind, "file": name, "sha256": sha256}

    def paths(self) -> tuple[Path, ...]:
        """The files on disk the model was read from (the archive, for a zipped model)."""
        if self.source.files.zipped:
            return (self.source.path,)
        return tuple(Path(file.path) for file in self.files)


class Format:
    """One model format (see the module's docstring); `name` is what messages and outputs call it."""

    name = ""
    checksum = ""  # what the format records to check its own bytes, as `verify` says it ("" for none)

    def recognise(self, container: Container) -> Optional[ModelSource]:
        """This format's model in `container`, or None when the container holds no model of this format."""
        raise NotImplementedError

    def model_files(self, source: ModelSource) -> list[ModelFile]:
        """The files a pin covers, by role, each hashed, before any weights are parsed; none where only reading
        finds them or the format records its own digest (`read` returns them then)."""
        return []

    def read(self, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
        """The model, every array checked; `files`: what `model_files` hashed."""
        raise NotImplementedError

    def origin(self, loaded: LoadedModel) -> tuple[str, str]:
        """What a model converted from this one records of it: a name and a digest (by default the model's)."""
        return loaded.source.path.name, loaded.sha256


def digested(bilm: BiLM, source: ModelSource, files: list[ModelFile]) -> LoadedModel:
    """A model whose one digest is `model_digest` over `files`, so that a directory and an archive of it agree."""
    names = ", ".join(Path(file.path).name for file in files)
    return LoadedModel(bilm, source, model_digest(files), f"the model digest, over {names}", tuple(files))
