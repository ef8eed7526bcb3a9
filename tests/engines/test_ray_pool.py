"""`engines.ray.pool_size`: the actors never hold the CPUs the tasks feeding them need (issue 48), without Ray."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.conftest import settings
from spacy_elmo.engines.ray import Pool, pool_size, with_elmo
from spacy_elmo.errors import SettingError


@pytest.mark.parametrize(
    ("workers", "threads", "reserve", "cpus", "nodes", "pool"),
    [
        (1, 1, 1, 2.0, 1, Pool(1, 1)),  # room for the actors and a read task: as asked
        (2, 1, 1, 2.0, 1, Pool(2, 0.5)),  # issue 48: both CPUs held, the read task waited forever
        (4, 2, 1, 8.0, 1, Pool(4, 1.75)),
        (3, 1, 1, 3.0, 1, Pool(3, 0.6666)),  # rounded down to Ray's 1/10000: 3 shares never exceed 2
        (1, 1, 1, 1.0, 1, Pool(1, 0.0)),  # a 1-CPU node: the actor asks for none, the read task gets it
        (2, 1, 0, 2.0, 1, Pool(2, 1)),  # no reserve (a Dataset in memory): as asked
        (4, 1, 1, 4.0, 2, Pool(3, 1)),  # 2 nodes: shares of 0.75 would leave 0.5 free on each, no whole CPU
        (4, 4, 1, 16.0, 2, Pool(3, 4)),
        (1, 4, 1, 4.0, 2, Pool(1, 3)),  # not even one actor of 4 fits beside the reserve
        (2, 1, 1, 0.0, 0, Pool(2, 1)),  # no CPUs yet (an autoscaling cluster): the autoscaler adds them
    ],
)
def test_the_pool_leaves_the_reserve_free(workers, threads, reserve, cpus, nodes, pool):
    assert pool_size(workers, threads, reserve, cpus, nodes) == pool


@given(
    workers=st.integers(1, 64),
    threads=st.integers(1, 16),
    reserve=st.integers(0, 4),
    cpus=st.integers(1, 256),
    nodes=st.integers(1, 8),
)
def test_a_whole_cpu_is_left_for_a_read_task_on_some_node(workers, threads, reserve, cpus, nodes):
    """Whatever the sizes: the actors ask for at most what the reserve leaves, and across nodes in whole CPUs
    (so that, Ray counting whole CPUs elsewhere, the free ones are whole on some node)."""
    pool = pool_size(workers, threads, reserve, float(cpus), nodes)
    assert 1 <= pool.actors <= workers and 0 <= pool.cpus_each <= threads
    if workers * threads + reserve > cpus:
        # in Ray's unit of a resource, 1/10000 CPU (25 x 0.28 is 7.000000000000001 in floats)
        assert round(pool.actors * pool.cpus_each * 10_000) <= max(cpus - reserve, 0) * 10_000
    if nodes > 1:
        assert pool.cpus_each == int(pool.cpus_each)


def test_sizes_are_checked_before_ray_is_asked():
    for option, value, said in (("workers", 0, "0"), ("threads", 1.5, "1.5"), ("reserve_cpus", -1, "-1")):
        with pytest.raises(SettingError, match=rf"^{option}: must be an integer >= \d, got {said}"):
            with_elmo(object(), settings("top"), **{option: value})
