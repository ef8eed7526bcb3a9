"""Cutting docs into the pieces the biLM reads: sentences where a doc has boundaries, else (and for long
sentences) the overlapping windows of `bilm.batching.windows`. Whitespace tokens are left out, as AllenNLP's
spaCy tokenizer does (their vectors are zero). Every cut depends only on the doc itself.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy
from spacy.tokens import Doc

from ..bilm.batching import windows


@dataclass
class Segment:
    """One sequence for the biLM: doc (index in the batch), positions (its token indices read, int64) and
    keep_start/keep_end (the part of `positions` whose outputs are used; the rest is context)."""

    doc: int
    positions: numpy.ndarray
    keep_start: int
    keep_end: int


def segment_docs(docs: Sequence[Doc], window_size: int, window_context: int) -> list[Segment]:
    """All segments of all docs, in doc order then text order."""
    segments: list[Segment] = []
    for index, doc in enumerate(docs):
        if not len(doc):
            continue
        is_space = numpy.fromiter((t.is_space for t in doc), dtype=bool, count=len(doc))
        spans = [(s.start, s.end) for s in doc.sents] if doc.has_annotation("SENT_START") else [(0, len(doc))]
        for start, end in spans:
            positions = numpy.arange(start, end, dtype=numpy.int64)[~is_space[start:end]]
            for w_start, w_end, k_start, k_end in windows(len(positions), window_size, window_context):
                segments.append(Segment(index, positions[w_start:w_end], k_start, k_end))
    return segments
