"""What a launcher tells a process, read in one place for pretraining and embed."""

import pytest

from spacy_elmo.launch_env import LaunchEnv, launch_env


def test_a_plain_process_is_rank_0_of_1():
    assert launch_env({}) == LaunchEnv(rank=0, world_size=1, local_rank=None)
    assert not launch_env({}).distributed


def test_torchrun_variables():
    env = launch_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (env.rank, env.world_size, env.local_rank, env.distributed) == (3, 4, 1, True)


def test_a_bad_value_names_the_variable():
    with pytest.raises(ValueError, match="WORLD_SIZE='four' must be an integer"):
        launch_env({"WORLD_SIZE": "four"})
