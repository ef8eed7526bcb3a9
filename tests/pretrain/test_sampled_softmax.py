import math

import torch

from spacy_elmo.pretrain.sampled_softmax import LogUniformSampler, full_softmax_nll, sampled_softmax_nll


def test_log_uniform_sampler_follows_zipf():
    sampler = LogUniformSampler(1000, 20000)
    samples = sampler.sample(torch.Generator().manual_seed(0))
    assert samples.min() >= 0 and samples.max() < 1000
    freq = torch.bincount(samples, minlength=1000).double() / 20000
    expected = torch.exp(sampler.log_expected.double()) / 20000
    assert abs(expected.sum().item() - 1.0) < 1e-5
    assert torch.allclose(freq[:5], expected[:5], atol=0.01)
    assert freq[0] > freq[10] > freq[500]


def test_accidental_hits_are_masked():
    torch.manual_seed(0)
    hidden, weight, bias = torch.randn(3, 4), torch.randn(10, 4), torch.randn(10)
    targets = torch.tensor([2, 5, 7])
    log_expected = torch.zeros(10)
    with_hit = sampled_softmax_nll(hidden, targets, weight, bias, torch.tensor([2, 3]), log_expected)
    without = sampled_softmax_nll(hidden, targets, weight, bias, torch.tensor([3]), log_expected)
    assert torch.allclose(with_hit[0], without[0])  # row 0's own target among the negatives: ignored
    assert not torch.allclose(with_hit[1], without[1])


def test_sampling_every_word_once_is_the_full_softmax():
    """Each word drawn once with expected count 1: no correction, and the target counted once."""
    torch.manual_seed(0)
    V, P = 50, 8
    hidden, weight, bias = torch.randn(16, P), torch.randn(V, P), torch.randn(V)
    targets = torch.randint(0, V, (16,))
    full = full_softmax_nll(hidden, targets, weight, bias)
    sampled = sampled_softmax_nll(hidden, targets, weight, bias, torch.arange(V), torch.zeros(V))
    assert torch.allclose(sampled, full, atol=1e-5)
    # a constant correction shifts every logit alike and changes nothing
    shifted = sampled_softmax_nll(hidden, targets, weight, bias, torch.arange(V), torch.full((V,), 3.0))
    assert torch.allclose(shifted, full, atol=1e-5)


def test_log_q_correction_lowers_the_weight_of_frequent_negatives():
    """A frequent negative (large expected count) must count less than a rare one of equal logit."""
    hidden = torch.ones(1, 2)
    weight = torch.zeros(3, 2)
    bias = torch.zeros(3)
    targets = torch.tensor([0])
    log_expected = torch.log(torch.tensor([1.0, 10.0, 0.1]))
    frequent = sampled_softmax_nll(hidden, targets, weight, bias, torch.tensor([1]), log_expected)
    rare = sampled_softmax_nll(hidden, targets, weight, bias, torch.tensor([2]), log_expected)
    assert frequent.item() < rare.item()
    expected = math.log(1.0 + math.exp(-math.log(10.0)))  # true logit corrected by log(1) = 0
    assert abs(frequent.item() - expected) < 1e-6
