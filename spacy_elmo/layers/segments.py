"""Cutting docs into the pieces the biLM reads, and putting its outputs back.

The biLM was trained on sentences framed by `<S>` and `</S>`, so a doc is cut into its sentences when
it has sentence boundaries, and into windows when it has none (or when a sentence is longer than a
window). Windows overlap: a window of `window_size` tokens keeps only its central part and reads
`window_context` extra tokens on each side, so a token near a cut still sees that much context on
both sides (an LSTM's useful context is short; 16 tokens costs 33% more work at the default size);
the cut itself (`windows`, `check_window`) is the biLM's, in `spacy_elmo.bilm.batching`.
Whitespace tokens (spaCy's `is_space`) are left out of what the biLM reads, as AllenNLP's spaCy
tokenizer does, so their neighbours see the text as the model was trained on; their vectors are zero.

Every cut depends only on the doc itself, so a doc's vectors do not depend on the other docs of
the batch.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy
from spacy.tokens import Doc

from ..bilm.batching import windows


@dataclass
class Segment:
    """One sequence for the biLM: the doc tokens it reads and the slice of them it answers for.

    doc: index of the doc in the batch; positions: doc token indices read, in order (int64);
    keep_start/keep_end: the part of `positions` whose outputs are used (the rest is context).
    """

    doc: int
    positions: numpy.ndarray
    keep_start: int
    keep_end: int

    @property
    def words(self) -> int:
        return len(self.positions)


def sentence_spans(doc: Doc) -> list[tuple]:
    """(start, end) token offsets of the doc's sentences, or the whole doc when it has no boundaries."""
    if len(doc) and doc.has_annotation("SENT_START"):
        return [(sent.start, sent.end) for sent in doc.sents]
    return [(0, len(doc))] if len(doc) else []


def segment_docs(docs: Sequence[Doc], window_size: int, window_context: int) -> list[Segment]:
    """All segments of all docs, in doc order then text order."""
    segments: list[Segment] = []
    for index, doc in enumerate(docs):
        if not len(doc):
            continue
        is_space = numpy.fromiter((t.is_space for t in doc), dtype=bool, count=len(doc))
        for start, end in sentence_spans(doc):
            positions = numpy.arange(start, end, dtype=numpy.int64)[~is_space[start:end]]
            for w_start, w_end, k_start, k_end in windows(len(positions), window_size, window_context):
                segments.append(Segment(index, positions[w_start:w_end], k_start, k_end))
    return segments
