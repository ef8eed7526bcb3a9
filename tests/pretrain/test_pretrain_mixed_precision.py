"""bf16 mixed precision on the CPU (`training.mixed_precision = true`): the same loss curve as fp32."""

import statistics

from pretrain_support import tiny_config
from spacy_elmo.pretrain.train import pretrain


def test_bf16_follows_the_fp32_loss_curve(trained_tiny, corpus_cache, tmp_path):
    config = tiny_config(
        corpus_cache,
        **{"training.max_steps": 120, "training.eval_every": 120, "training.mixed_precision": True},
    )
    bf16 = pretrain(config, tmp_path / "bf16", log=lambda message: None)
    fp32 = trained_tiny
    assert len(bf16.losses) == len(fp32.losses) == 120
    assert bf16.losses != fp32.losses, "mixed precision changed nothing: autocast did not run"
    # the curves agree window by window (20 steps each), within 3% of the fp32 loss
    for start in range(0, 120, 20):
        ours = statistics.mean(bf16.losses[start : start + 20])
        theirs = statistics.mean(fp32.losses[start : start + 20])
        assert abs(ours - theirs) <= 0.03 * theirs, (start, ours, theirs)
    assert bf16.last_eval is not None and fp32.last_eval is not None
    ppl_bf16, ppl_fp32 = bf16.last_eval["average_ppl"], fp32.last_eval["average_ppl"]
    assert abs(ppl_bf16 - ppl_fp32) <= 0.05 * ppl_fp32, (ppl_bf16, ppl_fp32)
