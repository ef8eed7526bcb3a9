"""`engines.ray.with_elmo` on Ray Data with 2 CPUs: the pipe's and `embed`'s vectors bit for bit from 2
actors, an actor killed mid-job restarted and its batch run again to the same output, bad rows handled as
the pipe handles them (and a NUL as `embed` does), a job as wide as the cluster finishing, the result read
back as Parquet with pyarrow alone."""

import os

import numpy
import pyarrow
import pyarrow.parquet
import pytest

from engines.conftest import (
    BAD_ROWS,
    NUL_REFUSED,
    NUL_TEXT,
    TEXTS,
    assert_as_pipe_and_embed,
    assert_embed_refuses_nul,
    read_back,
    settings,
)
from spacy_elmo.embed.arrow import ArrowEmbedder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ray_runtime():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def dataset(ray, texts, blocks=4):
    """`blocks` blocks made on the driver: with both CPUs taken by the actors, no task could split them."""
    table = pyarrow.table({"id": list(range(len(texts))), "text": texts})
    size = -(-len(texts) // blocks)
    return ray.data.from_arrow([table.slice(start, size) for start in range(0, len(texts), size)])


def test_a_dataset_gets_the_pipes_and_embeds_vectors_bit_for_bit(ray_runtime, pipe_layers, embed_layers, tmp_path):
    from spacy_elmo.engines.ray import with_elmo

    texts = [*TEXTS, *BAD_ROWS.values()]
    with_elmo(dataset(ray_runtime, texts), settings("all"), workers=2, batch_rows=64).write_parquet(str(tmp_path))
    rows = read_back(tmp_path, layers_first=True)
    assert_as_pipe_and_embed(rows, texts, pipe_layers, embed_layers)
    assert rows[len(TEXTS)][1].shape == (3, 0, 32) and rows[len(TEXTS) + 1][1].shape == (3, 50_000, 32)


def test_an_actor_killed_mid_job_is_restarted_to_the_same_vectors(ray_runtime, pipe_layers, tmp_path):
    from spacy_elmo.engines.ray import with_elmo

    marker = tmp_path / "died"

    class DiesOnce(ArrowEmbedder):
        def __call__(self, batch):
            if not marker.exists():
                marker.touch()
                os._exit(1)  # the actor's process ends mid-batch, as a killed one does
            return super().__call__(batch)

    out = tmp_path / "out"
    with_elmo(dataset(ray_runtime, TEXTS[:40], blocks=2), settings("all"), embedder=DiesOnce).write_parquet(str(out))
    assert marker.exists(), "no actor died"
    rows = read_back(out, layers_first=True)
    assert sorted(rows) == list(range(40))
    assert all(numpy.array_equal(rows[i][1], pipe_layers[text]) for i, text in enumerate(TEXTS[:40]))


def test_a_null_text_is_refused_naming_the_column(ray_runtime):
    from spacy_elmo.engines.ray import with_elmo

    ds = ray_runtime.data.from_arrow(pyarrow.table({"id": [0, 1], "text": ["fine", None]}))
    with pytest.raises(Exception, match=r"column 'text', row 1 of this batch: null, which cannot be embedded"):
        with_elmo(ds, settings("top")).take_all()
    with pytest.raises(ValueError, match=r"num_gpus=1 with device 'cpu': give each actor a GPU"):
        with_elmo(ds, settings("top"), num_gpus=1)


@pytest.mark.timeout(180)
def test_as_many_actors_as_the_cluster_has_cpus_finish_with_embeds_vectors(
    ray_runtime, pipe_layers, embed_layers, tmp_path
):
    """Issue 48: 2 actors of 1 CPU on 2 CPUs held both, and the read task that feeds them waited forever. The
    pool leaves a CPU to the read tasks (each actor asking Ray for half of the other), says so, and finishes."""
    from spacy_elmo.embed import EmbedWarning
    from spacy_elmo.engines.ray import with_elmo

    texts = TEXTS[:40]
    assert ray_runtime.cluster_resources()["CPU"] == 2
    read = ray_runtime.data.range(len(texts), override_num_blocks=4)  # read tasks, each asking for a CPU
    ds = read.map_batches(lambda b: {"id": b["id"], "text": [texts[i] for i in b["id"]]}, batch_format="numpy")
    with pytest.warns(EmbedWarning, match=r"starting 2 actor\(s\), each asking Ray for 0\.5 CPU\(s\)"):
        with_elmo(ds, settings("all"), workers=2, batch_rows=16).write_parquet(str(tmp_path))  # it hung here
    assert_as_pipe_and_embed(read_back(tmp_path, layers_first=True), texts, pipe_layers, embed_layers)


def test_a_text_with_a_nul_is_refused_as_embed_refuses_it(ray_runtime, tmp_path):
    from spacy_elmo.engines.ray import with_elmo

    assert_embed_refuses_nul(tmp_path)
    ds = ray_runtime.data.from_arrow(pyarrow.table({"id": [0, 1], "text": ["fine", NUL_TEXT]}))
    # no key_column: the batch's row, and how to have the dataset's named
    with pytest.raises(Exception, match=rf"column 'text', row 1 of this batch: {NUL_REFUSED}.*name a key_column"):
        with_elmo(ds, settings("top")).take_all()


def test_a_bad_row_past_the_first_batch_is_named_by_its_key(ray_runtime):
    """A Ray Data batch does not know where in the Dataset it is: the row is named by `key_column`."""
    from spacy_elmo.engines.ray import with_elmo

    texts: list = list(TEXTS[:100])
    texts[70] = None
    ds = ray_runtime.data.from_arrow(pyarrow.table({"id": list(range(100)), "text": texts}))
    named = r"column 'text', row \d+ of this batch: null, which cannot be embedded \(.*\); it is the row with id=70;"
    with pytest.raises(Exception, match=named):
        with_elmo(ds, settings("top"), batch_rows=32, key_column="id").take_all()
