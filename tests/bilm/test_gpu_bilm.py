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
