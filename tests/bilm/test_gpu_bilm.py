"""The biLM module on a GPU (issue 38); skipped without CUDA."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_a_seed_gives_the_same_weights_on_the_gpu_as_on_the_cpu(make_bilm) -> None:
    """reset_parameters on a model already on the GPU (it raised: a CPU generator for CUDA tensors)."""
    on_cpu = make_bilm(seed=3)
    on_gpu = make_bilm(seed=0).to("cuda")
    on_gpu.reset_parameters(3)
    assert all(p.device.type == "cuda" for p in on_gpu.parameters())
    gpu_state = on_gpu.state_dict()
    for name, value in on_cpu.state_dict().items():
        assert torch.equal(value, gpu_state[name].cpu()), name


SENTENCES = [
    "a b c d e f g h i".split(),
    "one".split(),
    "x y z w v u t".split(),
    "k l m n o p q r s t u v".split(),
]


@pytest.fixture
def fp32_products():
    """Real fp32 products on the GPU (TF32 off), restored after the test."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def layers_and_state(bilm, ids, runner_precision="fp32", state=None):
    from spacy_elmo.bilm.precision import products_for

    with torch.no_grad():
        out = bilm(
            ids.to(bilm.device), initial_state=state, return_final_state=True, products=products_for(runner_precision)
        )
    return out.layers.float().cpu(), out.final_state


def test_the_gpu_loop_and_its_graph_give_the_cpu_layers(make_bilm, fp32_products) -> None:
    """The static loop on the GPU: eager (first call), captured (second), replayed (third): all the CPU's layers
    and final state within 1e-5; one capture."""
    from spacy_elmo import chars

    ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
    expected, expected_state = layers_and_state(make_bilm(seed=7), ids)
    bilm = make_bilm(seed=7).to("cuda")
    for call in range(3):
        layers, state = layers_and_state(bilm, ids)
        torch.testing.assert_close(layers, expected, rtol=0, atol=1e-5, msg=f"call {call}")
        torch.testing.assert_close(state.h.cpu(), expected_state.h, rtol=0, atol=1e-5)
        torch.testing.assert_close(state.c.cpu(), expected_state.c, rtol=0, atol=1e-5)
    assert bilm.lstm.cuda_graphs.n_captures == 1


def test_a_graph_sees_weights_changed_after_its_capture(make_bilm, fp32_products) -> None:
    from spacy_elmo import chars

    ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
    bilm = make_bilm(seed=1).to("cuda")
    for _ in range(3):
        layers_and_state(bilm, ids)
    assert bilm.lstm.cuda_graphs.n_captures == 1
    bilm.load_state_dict(make_bilm(seed=2).to("cuda").state_dict())
    expected, _ = layers_and_state(make_bilm(seed=2), ids)
    layers, _ = layers_and_state(bilm, ids)
    assert bilm.lstm.cuda_graphs.n_captures == 1, "replayed, not captured again"
    torch.testing.assert_close(layers, expected, rtol=0, atol=1e-5)


def test_graphs_are_kept_for_the_most_recent_shapes_only(make_bilm) -> None:
    from spacy_elmo import chars

    bilm = make_bilm(seed=1).to("cuda")
    bilm.lstm.cuda_graphs.max_graphs = 2
    batches = [torch.from_numpy(chars.batch_to_ids(SENTENCES[: n + 1])) for n in range(4)]
    for ids in batches + batches:
        layers_and_state(bilm, ids)
    assert bilm.lstm.cuda_graphs.n_captures == 4 and len(bilm.lstm.cuda_graphs._graphs) == 2


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_gpu_loop_in_half_precision_is_within_two_percent(make_bilm, precision) -> None:
    from spacy_elmo import chars

    ids = torch.from_numpy(chars.batch_to_ids(SENTENCES))
    expected, _ = layers_and_state(make_bilm(seed=3), ids)
    bilm = make_bilm(seed=3).to("cuda")
    for _ in range(3):
        layers, _ = layers_and_state(bilm, ids, precision)
        assert float((layers - expected).abs().max()) <= 2e-2 * float(expected.abs().max())


def test_a_runner_on_the_gpu_takes_the_gpus_token_budget_unless_one_is_set(make_bilm) -> None:
    from spacy_elmo import BiLMRunner
    from spacy_elmo.bilm.batching import GPU_TOKEN_BUDGET

    assert BiLMRunner(make_bilm().to("cuda")).token_budget == GPU_TOKEN_BUDGET
    assert BiLMRunner(make_bilm().to("cuda"), token_budget=4096).token_budget == 4096
