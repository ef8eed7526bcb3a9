"""Cutting docs into sentences and overlapping windows."""

import numpy
import pytest
import spacy
from hypothesis import given
from hypothesis import strategies as st
from spacy.tokens import Doc

from spacy_elmo.bilm.batching import check_window, windows
from spacy_elmo.layers.segments import segment_docs


@given(n=st.integers(0, 700), size=st.integers(1, 64), context=st.integers(0, 31))
def test_windows_tile_and_read_context(n, size, context):
    if 2 * context >= size:
        with pytest.raises(ValueError):
            check_window(size, context)
        return
    covered = []
    for start, end, keep_start, keep_end in windows(n, size, context):
        assert 0 <= start < end <= n and end - start <= size
        assert 0 <= keep_start < keep_end <= end - start
        kept = range(start + keep_start, start + keep_end)
        covered.extend(kept)
        # every kept token sees `context` tokens on both sides, unless the doc ends first
        assert start + keep_start - start >= min(context, start + keep_start)
        assert end - (start + keep_end) >= min(context, n - (start + keep_end))
    assert covered == list(range(n))


def test_sentences_windows_and_whitespace():
    nlp = spacy.blank("en")
    words = ["A", "b", "\n", "c", ".", "D", "e", "."]
    spaces = [True, True, False, False, True, True, False, False]
    doc = Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=[True, False, False, False, False, True, False, False])
    empty = Doc(nlp.vocab, words=[])
    no_sents = Doc(nlp.vocab, words=[f"w{i}" for i in range(10)])
    segments = segment_docs([doc, empty, no_sents], window_size=6, window_context=1)
    assert [s.doc for s in segments] == [0, 0, 2, 2, 2]
    numpy.testing.assert_array_equal(segments[0].positions, [0, 1, 3, 4])  # "\n" left out
    numpy.testing.assert_array_equal(segments[1].positions, [5, 6, 7])
    kept = [s.positions[s.keep_start : s.keep_end].tolist() for s in segments[2:]]
    assert kept == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # stride 6 - 2 * 1
    assert all(len(s.positions) <= 6 for s in segments)
