"""The token cache is exact, bounded, least-recently-used, and never serves stale vectors."""

import numpy
import torch

from spacy_elmo import chars
from spacy_elmo.bilm.runner import BiLMRunner


def test_cached_outputs_equal_uncached(reference_bilm, all_sentences):
    sentences = all_sentences
    plain = BiLMRunner(reference_bilm, token_budget=200).embed_sentences(sentences)
    reference_bilm.set_token_cache(64)  # small: forces evictions
    try:
        embedder = BiLMRunner(reference_bilm, token_budget=200)
        for _ in range(2):  # second pass is mostly hits
            cached = embedder.embed_sentences(sentences)
            # equal up to the float noise of running the CNN on a different set of rows
            for a, b in zip(plain, cached):
                numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
        cache = reference_bilm.token_cache
        assert cache.hits > 0 and cache.misses > 0 and len(cache) <= 64
    finally:
        reference_bilm.set_token_cache(None)


def test_no_dedup_no_cache_path_is_the_same(reference_bilm, all_sentences):
    sentences = all_sentences[:6]
    deduped = BiLMRunner(reference_bilm).embed_sentences(sentences)
    reference_bilm.dedupe_tokens = False
    try:
        plain = BiLMRunner(reference_bilm).embed_sentences(sentences)
    finally:
        reference_bilm.dedupe_tokens = True
    for a, b in zip(deduped, plain):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_lru_eviction_order(make_bilm):
    bilm = make_bilm()
    bilm.set_token_cache(2)
    with torch.no_grad():
        for words in (["a"], ["b"], ["a"], ["c"]):  # "b" is least recently used when "c" arrives
            bilm.embed_tokens(torch.from_numpy(chars.batch_to_ids([words], add_boundaries=False)))
    keys = set(bilm.token_cache._slots)
    as_key = lambda w: chars.tokens_to_ids([w])[0].astype(numpy.int32).tobytes()
    assert keys == {as_key("a"), as_key("c")}


def test_cache_cleared_when_weights_change(make_bilm):
    bilm = make_bilm()
    bilm.set_token_cache(100)
    ids = torch.from_numpy(chars.batch_to_ids([["word", "other"]]))
    with torch.no_grad():
        before = bilm.embed_tokens(ids)
        bilm.token_encoder.projection_b.add_(1.0)  # an in-place update, as an optimizer step does
        after = bilm.embed_tokens(ids)
    mask = ids.gt(0).any(-1)
    assert torch.allclose(after[mask], before[mask] + 1.0, atol=1e-6)


def test_cache_not_used_in_training(make_bilm):
    bilm = make_bilm()
    bilm.set_token_cache(100)
    bilm.train()
    ids = torch.from_numpy(chars.batch_to_ids([["word"]]))
    out = bilm.embed_tokens(ids)
    assert out.requires_grad and len(bilm.token_cache) == 0
