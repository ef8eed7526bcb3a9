import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from fixture_paths import ROOT
from spacy_elmo.io.arrays import bilm_arrays
from spacy_elmo.io.resolve import load_model
from spacy_elmo.pretrain.build import build_model, pretrain
from spacy_elmo.pretrain.config import PretrainSettings
from spacy_elmo.pretrain.corpus import CorpusSettings, prepare_corpus
from spacy_elmo.pretrain.vocab import Vocab

TEARDOWN_WORKER = Path(__file__).parent / "ddp_teardown_worker.py"


def torchrun(*args: str):
    """`torchrun --standalone`, 2 processes, on the loopback interface with one thread each.

    An explicit loopback address (not the host's FQDN) for the rendezvous and gloo, so that the
    test does not depend on the host's name resolution; one OpenMP thread per process, whatever
    the caller's environment says, so that two processes fit a 2-core machine.
    """
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc_per_node",
        "2",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.slow
def test_two_process_gloo_ddp_matches_one_process_on_the_same_global_batch(
    tmp_path, corpus_cache, sample_train, tiny_config
):
    """torchrun, 2 CPU processes x 16 rows == 1 process x 32 rows, after several steps.

    Plain SGD, so that the parameters are a linear read-out of the averaged gradients: Adam divides
    by the gradient's own scale and turns float rounding in near-zero gradients (a character seen
    once) into full-size steps, which would test Adam rather than the data-parallel averaging.
    """
    overrides = {
        "training.max_steps": 6,
        "training.checkpoint_every": 0,
        "training.eval_every": 0,
        "paths.dev": None,
        "training.dropout": 0.0,
        "training.optimizer.@optimizers": "spacy-elmo.SGD.v1",
        "training.optimizer.learn_rate": 1.0,
    }
    single = tmp_path / "single"
    pretrain(tiny_config(**overrides), single, log=lambda m: None)

    ddp = tmp_path / "ddp"
    args = [
        "-m",
        "spacy_elmo",
        "pretrain",
        "pretrain_tiny.cfg",
        str(ddp),
        "--paths.train",
        str(sample_train),
        "--paths.dev",
        "null",
        "--corpus.cache_dir",
        str(corpus_cache),
        "--training.n_threads",
        "1",
    ]
    for key, value in overrides.items():
        if key != "paths.dev":
            args += [f"--{key}", str(value)]
    done = torchrun(*args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "2 process(es)" in done.stdout

    one = dict(bilm_arrays(load_model(single / "model").bilm))
    two = dict(bilm_arrays(load_model(ddp / "model").bilm))
    assert one.keys() == two.keys()
    settings = PretrainSettings.from_config(tiny_config(**overrides))
    stream = prepare_corpus(sample_train, CorpusSettings(), corpus_cache)
    initial, _ = build_model(
        settings, Vocab.from_counts(stream.types, stream.counts, 3000), stream, None, lambda m: None
    )
    start = dict(bilm_arrays(initial))
    largest_gap = 0.0
    for name in one:
        numpy.testing.assert_allclose(two[name], one[name], rtol=1e-5, atol=1e-6, err_msg=name)
        largest_gap = max(largest_gap, float(numpy.abs(two[name] - one[name]).max()))
    # the steps moved the weights far more than the two runs differ
    largest_step = max(float(numpy.abs(one[name] - start[name]).max()) for name in one)
    assert largest_step > 1e-3 > 100 * largest_gap, (largest_step, largest_gap)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc")
def test_ending_the_process_group_stops_gloos_threads_after_ddp(tmp_path):
    """The cause of a rare SIGABRT/SIGSEGV of a rank after a successful DDP run: the group outlived
    `end_distributed` (torch.distributed.nn, imported by DDP, had bound it as a default argument), and
    gloo's threads were torn down at interpreter exit. Deterministic, unlike the crash it prevents."""
    done = torchrun(str(TEARDOWN_WORKER), str(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for rank in (0, 1):
        threads = (tmp_path / f"rank_{rank}.txt").read_text(encoding="utf-8").split("\n")
        assert not [name for name in threads if "gloo" in name], (rank, threads)
