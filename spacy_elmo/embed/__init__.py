"""`spacy elmo embed`: text or JSONL files to HDF5, streamed, resumable, and sharded across processes."""

from .output import EmbedSettings, device_for_rank, embed_file, read_lines, word_splitter
from .shards import Shard, ShardError, merge_shards, parse_shard, shard_from_env, shard_path
from .store import EmbedWarning, OutputError

__all__ = [
    "EmbedSettings",
    "EmbedWarning",
    "OutputError",
    "Shard",
    "ShardError",
    "device_for_rank",
    "embed_file",
    "merge_shards",
    "parse_shard",
    "read_lines",
    "shard_from_env",
    "shard_path",
    "word_splitter",
]
