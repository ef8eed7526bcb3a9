"""Tokens to ELMo character ids: each token's UTF-8 bytes framed by begin/end-of-word markers and
padded, exactly as bilm-tf and AllenNLP do, so imported weights see the inputs they were trained on. Ids
use the AllenNLP layout (shifted by +1) so that 0 means "no token here". Vectorised over a whole batch.
"""

from collections.abc import Sequence

import numpy

MAX_CHARACTERS_PER_TOKEN = 50

# Raw (unshifted) ids of bilm-tf: bytes 0-255, then the markers.
BOS_CHAR = 256  # the character of the sentence-start token <S>
EOS_CHAR = 257  # the character of the sentence-end token </S>
BOW_CHAR = 258  # begin of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # padding inside a token
ID_SHIFT = 1  # AllenNLP layout: raw id + 1, so that 0 is "no token"
N_CHARACTERS = 262  # 261 raw ids + the "no token" id 0

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_token(char: int, width: int) -> numpy.ndarray:
    row = numpy.full(width, PAD_CHAR, dtype=numpy.int32)
    row[:3] = (BOW_CHAR, char, EOW_CHAR)
    return row + ID_SHIFT


def batch_to_ids(
    sentences: Sequence[Sequence[str]],
    *,
    add_boundaries: bool = True,
    max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
) -> numpy.ndarray:
    """Character ids (batch, max_len, max_chars), int32, rows padded with id 0; with `add_boundaries` each
    sentence is framed by `<S>` and `</S>`, as the biLM was trained. A token longer than
    `max_characters_per_token - 2` bytes is truncated (its end-of-word marker is kept)."""
    if max_characters_per_token < 3:
        raise ValueError(f"max_characters_per_token must be at least 3, got {max_characters_per_token}")
    width = max_characters_per_token
    n_rows = len(sentences)
    if n_rows == 0:
        return numpy.zeros((0, 0, width), dtype=numpy.int32)
    offset = 1 if add_boundaries else 0
    lengths = numpy.asarray([len(s) for s in sentences], dtype=numpy.int64)
    out = numpy.zeros((n_rows, int(lengths.max()) + 2 * offset, width), dtype=numpy.int32)
    # Positions (row, column) of every real token, in order.
    rows = numpy.repeat(numpy.arange(n_rows), lengths)
    starts = numpy.cumsum(lengths) - lengths
    cols = numpy.arange(int(lengths.sum())) - numpy.repeat(starts, lengths) + offset
    flat = [tok for sent in sentences for tok in sent]
    encoded = [tok.encode("utf-8", "ignore") for tok in flat]  # lone surrogates dropped
    byte_lengths = numpy.fromiter((len(b) for b in encoded), dtype=numpy.int64, count=len(encoded))
    kept = numpy.minimum(byte_lengths, width - 2)
    token_chars = numpy.full((len(encoded), width), PAD_CHAR + ID_SHIFT, dtype=numpy.int32)
    token_chars[:, 0] = BOW_CHAR + ID_SHIFT
    token_chars[numpy.arange(len(encoded)), kept + 1] = EOW_CHAR + ID_SHIFT
    all_bytes = numpy.frombuffer(b"".join(encoded), dtype=numpy.uint8).astype(numpy.int32)
    # Which bytes survive truncation, and where they go.
    byte_starts = numpy.cumsum(byte_lengths) - byte_lengths
    byte_token = numpy.repeat(numpy.arange(len(encoded)), kept)
    byte_pos = numpy.arange(int(kept.sum())) - numpy.repeat(numpy.cumsum(kept) - kept, kept)
    src = numpy.repeat(byte_starts, kept) + byte_pos
    token_chars[byte_token, byte_pos + 1] = all_bytes[src] + ID_SHIFT
    # The literal tokens "<S>" and "</S>" are the boundary tokens, as in bilm-tf and AllenNLP.
    for marker, char in ((BOS_TOKEN, BOS_CHAR), (EOS_TOKEN, EOS_CHAR)):
        token_chars[[k for k, tok in enumerate(flat) if tok == marker]] = _marker_token(char, width)
    out[rows, cols] = token_chars
    if add_boundaries:
        out[:, 0] = _marker_token(BOS_CHAR, width)
        out[numpy.arange(n_rows), lengths + 1] = _marker_token(EOS_CHAR, width)
    return out


def tokens_to_ids(tokens: Sequence[str], max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN) -> numpy.ndarray:
    """Character ids of single tokens, shape (n_tokens, max_chars): for context-free token embeddings."""
    return batch_to_ids([list(tokens)], add_boundaries=False, max_characters_per_token=max_characters_per_token)[0]


def ids_to_text(ids: numpy.ndarray) -> list[str]:
    """Decode a (n_tokens, max_chars) id array back to strings (for debugging and error messages)."""
    markers = {BOS_CHAR: BOS_TOKEN, EOS_CHAR: EOS_TOKEN}
    words = []
    for row in numpy.asarray(ids):
        raw = row[row > 0] - ID_SHIFT
        if len(raw) >= 2 and int(raw[1]) in markers:
            words.append(markers[int(raw[1])])
        else:
            words.append(bytes(int(c) for c in raw if c < 256).decode("utf-8", "replace"))
    return words
