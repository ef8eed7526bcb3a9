"""The runner. Stateless means a sentence's vectors do not depend on its batch: size, order, neighbours."""

import random
import warnings

import numpy
import pytest
import torch

import spacy_elmo.bilm.runner as runner_module
from spacy_elmo import chars
from spacy_elmo.bilm.batching import embed_windowed, windows
from spacy_elmo.bilm.precision import slower_than_fp32_here
from spacy_elmo.bilm.runner import BiLMRunner, check_threads, parse_device
from spacy_elmo.errors import SettingError, named_settings


@pytest.mark.parametrize("token_budget", [1, 60, 500, 100000])
def test_same_outputs_whatever_the_batch_size(reference_bilm, all_sentences, token_budget):
    alone = [BiLMRunner(reference_bilm).embed_batch([s])[0] for s in all_sentences]
    batched = BiLMRunner(reference_bilm, token_budget=token_budget).embed_sentences(all_sentences)
    for a, b in zip(alone, batched):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("token_budget", [1, 60, 500, 100000])
def test_cpu_outputs_are_bit_identical_whatever_the_batch(reference_bilm, all_sentences, token_budget):
    """Fixed-shape products in the token encoder, none under 4 rows in the LSTM: no batch rounding."""
    alone = [BiLMRunner(reference_bilm).embed_batch([s])[0] for s in all_sentences]
    batched = BiLMRunner(reference_bilm, token_budget=token_budget).embed_sentences(all_sentences)
    for sentence, a, b in zip(all_sentences, alone, batched):
        assert numpy.array_equal(a, b), f"{sentence}: max diff {numpy.abs(a - b).max()}"


def test_same_outputs_whatever_the_order(reference_bilm, all_sentences):
    order = list(range(len(all_sentences)))
    random.Random(0).shuffle(order)
    embedder = BiLMRunner(reference_bilm)
    straight = embedder.embed_batch(all_sentences)
    shuffled = embedder.embed_batch([all_sentences[i] for i in order])
    for position, index in enumerate(order):
        numpy.testing.assert_allclose(straight[index], shuffled[position], atol=1e-6, rtol=0)


def test_padding_positions_are_zero_and_masked(make_bilm):
    bilm = make_bilm()
    ids = torch.from_numpy(chars.batch_to_ids([["a", "b", "c", "d"], ["e"]]))
    out = bilm(ids)
    assert out.mask.tolist() == [[True] * 6, [True] * 3 + [False] * 3]
    assert out.layers.shape == (3, 2, 6, 16)
    assert torch.all(out.layers[:, 1, 3:] == 0)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("clips", [(None, None), (0.5, 0.25), (0.0, 3.0)])
def test_configurations_run_and_stay_batch_independent(make_bilm, skip, clips):
    bilm = make_bilm(
        use_skip_connections=skip, cell_clip=clips[0], proj_clip=clips[1], n_layers=3, n_highway=0, activation="tanh"
    )
    sentences = [["x"] * n for n in (1, 7, 3, 12)]
    embedder = BiLMRunner(bilm)
    together = embedder.embed_batch(sentences)
    for sentence, got in zip(sentences, together):
        numpy.testing.assert_allclose(embedder.embed_batch([sentence])[0], got, atol=1e-6, rtol=0)
    if clips[1] is not None:
        # without skip connections a layer's output is the clipped projection itself
        if not skip:
            assert numpy.abs(together[1][1:]).max() <= clips[1] + 1e-7


def test_proj_clip_zero_is_a_value_not_off(make_bilm):
    bilm = make_bilm(proj_clip=0.0, use_skip_connections=False)
    layers = BiLMRunner(bilm).embed_sentences([["a", "b"]])[0]
    assert numpy.all(layers[1:] == 0)


def test_empty_sentence_and_empty_batch(reference_bilm):
    embedder = BiLMRunner(reference_bilm)
    out = embedder.embed_sentences([[], ["a"]])
    assert out[0].shape == (3, 0, 32) and out[1].shape == (3, 1, 32)
    assert embedder.embed_sentences([]) == []


def test_stateful_state_depends_on_history(reference_bilm, all_sentences):
    stateful = BiLMRunner(reference_bilm, stateful=True)
    first = stateful.embed_batch([all_sentences[0]])[0]
    second = stateful.embed_batch([all_sentences[0]])[0]
    assert not numpy.allclose(first, second, atol=1e-6)
    stateful.reset_state()
    numpy.testing.assert_array_equal(stateful.embed_batch([all_sentences[0]])[0], first)
    with pytest.raises(ValueError, match="stateful"):
        stateful.embed_sentences([all_sentences[0]])


def test_out_of_memory_batch_is_split_and_completes(reference_bilm, all_sentences, monkeypatch):
    expected = BiLMRunner(reference_bilm, token_budget=100000).embed_sentences(all_sentences)
    embedder = BiLMRunner(reference_bilm, token_budget=100000)
    real_forward = embedder._forward

    def forward_that_fits_4(batch):
        if len(batch) > 4:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return real_forward(batch)

    monkeypatch.setattr(embedder, "_forward", forward_that_fits_4)
    got = embedder.embed_sentences(all_sentences)
    assert embedder.n_splits > 0 and embedder.token_budget < 100000
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        numpy.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_other_errors_are_not_swallowed(reference_bilm, monkeypatch):
    embedder = BiLMRunner(reference_bilm)
    monkeypatch.setattr(embedder, "_forward", lambda batch: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        embedder.embed_sentences([["a"], ["b"]])


def test_single_sentence_out_of_memory_is_a_clear_error(reference_bilm, monkeypatch):
    embedder = BiLMRunner(reference_bilm)
    monkeypatch.setattr(embedder, "_forward", lambda batch: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(MemoryError, match="single sentence of 3 tokens"):
        embedder.embed_sentences([["a", "b", "c"]])


def test_bf16_precision_close_to_fp32(reference_bilm, all_sentences):
    fp32 = BiLMRunner(reference_bilm).embed_sentences(all_sentences[:5])
    bf16 = BiLMRunner(reference_bilm, precision="bf16").embed_sentences(all_sentences[:5])
    for a, b in zip(fp32, bf16):
        assert b.dtype == numpy.float32
        relative = numpy.linalg.norm(a - b) / numpy.linalg.norm(a)
        assert relative < 2e-2
    with pytest.raises(SettingError, match="^precision: must be one of"):
        BiLMRunner(reference_bilm, precision="fp8")


def test_a_precision_slower_than_fp32_on_this_cpu_is_said_once(reference_bilm, monkeypatch):
    monkeypatch.setattr(runner_module, "slower_than_fp32_here", lambda precision: "no kernels for it")
    runner = BiLMRunner(reference_bilm, precision="bf16")
    with pytest.warns(UserWarning, match=r"precision 'bf16' runs slower than 'fp32' on this CPU \(no kernels for it\)"):
        runner.embed_sentences([["a", "b"]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner.embed_sentences([["a", "b"]])  # said once per runner
    monkeypatch.setattr(runner_module, "slower_than_fp32_here", lambda precision: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BiLMRunner(reference_bilm, precision="bf16").embed_sentences([["a", "b"]])


def test_fp32_is_never_slower_than_itself():
    assert slower_than_fp32_here("fp32") is None


def test_windowed_sentences_are_stitched_from_their_windows(reference_bilm, all_sentences):
    """Each window answers for its central part; sentences that fit are run as `embed_sentences` runs them."""
    long = [w for s in all_sentences for w in s][:50]
    short = [s[:10] for s in all_sentences[:4]]
    runner = BiLMRunner(reference_bilm, token_budget=60)
    got = embed_windowed(runner, [long, *short, []], window_size=10, window_context=2)
    assert got[0].shape[1] == 50 and got[-1].shape[1] == 0
    for start, end, keep_start, keep_end in windows(50, 10, 2):
        alone = BiLMRunner(reference_bilm).embed_batch([long[start:end]])[0]
        assert numpy.array_equal(got[0][:, start + keep_start : start + keep_end], alone[:, keep_start:keep_end])
    for a, b in zip(got[1:5], BiLMRunner(reference_bilm, token_budget=60).embed_sentences(short)):
        assert numpy.array_equal(a, b)


@pytest.mark.parametrize("text", ["tpu", "xyz", "mps", "cuda:99"])
def test_parse_device_refuses_a_device_this_machine_cannot_use_naming_the_option(text: str) -> None:
    with pytest.raises(SettingError, match=rf"^device: {text!r}"):
        parse_device(text)
    with pytest.raises(SettingError, match=rf"^--device: {text!r}"), named_settings(device="--device"):
        parse_device(text)


def test_parse_device_accepts_the_cpu_and_refuses_cuda_without_it() -> None:
    assert parse_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            parse_device("cuda")


def test_check_threads_refuses_a_negative_count_naming_the_option() -> None:
    assert check_threads(0) == 0 and check_threads(3) == 3
    with pytest.raises(SettingError, match="^n_threads: -1: give a number of threads"):
        check_threads(-1)


def test_a_token_budget_of_0_is_the_devices_default_and_a_set_one_is_kept(make_bilm):
    from spacy_elmo.bilm.batching import DEFAULT_TOKEN_BUDGET

    assert BiLMRunner(make_bilm()).token_budget == DEFAULT_TOKEN_BUDGET
    assert BiLMRunner(make_bilm(), token_budget=100).token_budget == 100
