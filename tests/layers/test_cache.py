"""The layer cache on its own: content keys, least-recently-used eviction, and a bound in bytes that holds
whatever the stream (the pipe's own policy, when it reads and fills the cache, is in tests/pipeline/test_pipe.py
and tests/layers/test_listener.py)."""

import numpy
import spacy
from spacy.tokens import Doc

from spacy_elmo.layers.cache import LayerCache, doc_key


def layers(n_tokens: int, value: float = 0.0) -> numpy.ndarray:
    return numpy.full((3, n_tokens, 4), value, dtype="float32")  # 48 bytes a token


def test_the_key_is_the_content_not_the_doc_object():
    nlp = spacy.blank("en")
    assert doc_key(nlp("The same text .")) == doc_key(nlp("The same text ."))
    assert doc_key(nlp("The same text .")) != doc_key(nlp("The same text!"))
    # the same text cut into other tokens, or into sentences, is embedded otherwise
    assert doc_key(Doc(nlp.vocab, words=["ab", "c"], spaces=[False, False])) != doc_key(
        Doc(nlp.vocab, words=["a", "bc"], spaces=[False, False])
    )
    split = nlp("One . Two .")
    split[2].is_sent_start = True
    assert doc_key(split) != doc_key(nlp("One . Two ."))


def test_a_stream_of_distinct_keys_stays_within_the_bound():
    cache = LayerCache(max_bytes=10 * 48 * 5)  # ten docs of five tokens
    for i in range(1000):
        cache.put(i.to_bytes(4, "little"), layers(5, i))
        assert cache.n_bytes <= cache.max_bytes
    assert cache.n_bytes == cache.max_bytes
    # the ten most recent are kept, the rest evicted
    assert cache.get((999).to_bytes(4, "little"))[0, 0, 0] == 999
    assert cache.get((989).to_bytes(4, "little")) is None


def test_a_read_keeps_an_entry_from_eviction():
    cache = LayerCache(max_bytes=2 * 48)
    cache.put(b"a", layers(1))
    cache.put(b"b", layers(1))
    assert cache.get(b"a") is not None  # "b" is now the least recently used
    cache.put(b"c", layers(1))
    assert cache.get(b"b") is None and cache.get(b"a") is not None and cache.get(b"c") is not None


def test_replacing_an_entry_counts_its_bytes_once():
    cache = LayerCache(max_bytes=1000)
    cache.put(b"a", layers(2))
    cache.put(b"a", layers(3))
    assert cache.n_bytes == 3 * 48


def test_an_entry_larger_than_the_bound_is_not_kept():
    cache = LayerCache(max_bytes=48)
    cache.put(b"small", layers(1))
    cache.put(b"large", layers(2))
    assert cache.get(b"large") is None and cache.get(b"small") is not None and cache.n_bytes == 48


def test_clear_gives_the_memory_back():
    cache = LayerCache(max_bytes=1000)
    cache.put(b"a", layers(2))
    cache.clear()
    assert cache.n_bytes == 0 and cache.get(b"a") is None
