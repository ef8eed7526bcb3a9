import subprocess
import sys

import numpy

from pretrain_support import SAMPLE_TRAIN, tiny_config
from spacy_elmo.bilm.native import load_native
from spacy_elmo.bilm.weights import bilm_arrays
from spacy_elmo.pretrain.corpus import CorpusSettings, build_vocab, prepare_corpus
from spacy_elmo.pretrain.train import _build_model, pretrain


def test_two_process_gloo_ddp_matches_one_process_on_the_same_global_batch(tmp_path, corpus_cache):
    """torchrun, 2 CPU processes x 16 rows == 1 process x 32 rows, after several steps.

    Plain SGD, so that the parameters are a linear read-out of the averaged gradients: Adam divides
    by the gradient's own scale and turns float rounding in near-zero gradients (a character seen
    once) into full-size steps, which would test Adam rather than the data-parallel averaging.
    """
    overrides = {"training.max_steps": 6, "training.checkpoint_every": 0, "training.eval_every": 0,
                 "paths.dev": None, "training.dropout": 0.0, "training.optimizer.name": "sgd",
                 "training.optimizer.learn_rate": 1.0}
    single = tmp_path / "single"
    pretrain(tiny_config(corpus_cache, **overrides), single, log=lambda m: None)

    ddp = tmp_path / "ddp"
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "spacy_elmo", "pretrain", "pretrain_tiny.cfg", str(ddp),
            "--paths.train", str(SAMPLE_TRAIN), "--paths.dev", "null", "--corpus.cache_dir", str(corpus_cache),
            "--training.n_threads", "1"]
    for key, value in overrides.items():
        if key != "paths.dev":
            args += [f"--{key}", str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "2 process(es)" in done.stdout

    one = dict(bilm_arrays(load_native(single / "model")))
    two = dict(bilm_arrays(load_native(ddp / "model")))
    assert one.keys() == two.keys()
    config = tiny_config(corpus_cache, **overrides)
    stream = prepare_corpus(SAMPLE_TRAIN, CorpusSettings(), corpus_cache)
    initial, _ = _build_model(config, build_vocab(stream, 3000), stream, None, lambda m: None)
    start = dict(bilm_arrays(initial))
    largest_gap = 0.0
    for name in one:
        numpy.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)
        largest_gap = max(largest_gap, float(numpy.abs(two[name] - one[name]).max()))
    # the steps moved the weights far more than the two runs differ
    largest_step = max(float(numpy.abs(one[name] - start[name]).max()) for name in one)
    assert largest_step > 1e-3 > 100 * largest_gap, (largest_step, largest_gap)
