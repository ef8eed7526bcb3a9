"""`spacy elmo embed`: text or JSONL files to HDF5 or Parquet, streamed, resumable, and sharded across processes."""

from .output import EmbedSettings, embed_file
from .shards import ShardError, merge_shards
from .store import EmbedWarning, OutputError

__all__ = ["EmbedSettings", "EmbedWarning", "OutputError", "ShardError", "embed_file", "merge_shards"]
