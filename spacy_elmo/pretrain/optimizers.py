"""Pretraining's optimizers, chosen in the config by their registered names, as spaCy chooses its own:

    [training.optimizer]
    @optimizers = "spacy-elmo.Adam.v1"
    learn_rate = 0.001
    eps = 1e-8

Each is a settings class registered in thinc's `optimizers` registry: the block's keys are its fields,
validated strictly (a problem names its key), and `create` makes the torch optimizer of the model's
parameters. `learn_rate` is the peak rate; [training.schedule] sets the rate of every step (schedule.py).
thinc's own `Adam.v1` and `SGD.v1` make thinc optimizers, for `spacy train`; these make torch ones.
Another optimizer is one more registered subclass of `TorchOptimizer`.
"""

from collections.abc import Iterable

import torch
from pydantic import BaseModel, ConfigDict, Field
from thinc.api import registry


class TorchOptimizer(BaseModel):
    """The settings of a torch optimizer, as [training.optimizer] gives them."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    learn_rate: float = Field(0.001, gt=0)

    def create(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        raise NotImplementedError


@registry.optimizers("spacy-elmo.Adam.v1")
class Adam(TorchOptimizer):
    eps: float = Field(1e-8, gt=0)

    def create(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.learn_rate, eps=self.eps)


@registry.optimizers("spacy-elmo.Adagrad.v1")
class Adagrad(TorchOptimizer):
    initial_accumulator_value: float = Field(1.0, ge=0)

    def create(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.Adagrad(params, lr=self.learn_rate, initial_accumulator_value=self.initial_accumulator_value)


@registry.optimizers("spacy-elmo.SGD.v1")
class SGD(TorchOptimizer):
    def create(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.learn_rate)
