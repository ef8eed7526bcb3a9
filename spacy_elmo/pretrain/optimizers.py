"""Pretraining's optimizers, chosen in the config by their registered names (`@optimizers`), as spaCy
chooses its own. Each returns a factory of a torch optimizer (thinc's own `Adam.v1` makes a thinc one, for
`spacy train`); `learn_rate` is the peak rate of [training.schedule].
"""

from collections.abc import Iterable
from functools import partial
from typing import Annotated, Callable

import torch
from pydantic import ConfigDict, Field, validate_call
from thinc.api import registry

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
Rate = Annotated[float, Field(gt=0)]
checked = validate_call(config=ConfigDict(strict=True))
"""A registered function's arguments as the config gives them, checked: 1.5 is no integer, "1" no number."""


@registry.optimizers("spacy-elmo.Adam.v1")
@checked
def adam(learn_rate: Rate = 0.001, eps: Rate = 1e-8) -> OptimizerFactory:
    return partial(torch.optim.Adam, lr=learn_rate, eps=eps)


@registry.optimizers("spacy-elmo.Adagrad.v1")
@checked
def adagrad(
    learn_rate: Rate = 0.001, initial_accumulator_value: Annotated[float, Field(ge=0)] = 1.0
) -> OptimizerFactory:
    return partial(torch.optim.Adagrad, lr=learn_rate, initial_accumulator_value=initial_accumulator_value)


@registry.optimizers("spacy-elmo.SGD.v1")
@checked
def sgd(learn_rate: Rate = 0.001) -> OptimizerFactory:
    return partial(torch.optim.SGD, lr=learn_rate)
