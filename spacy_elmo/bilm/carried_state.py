"""The recurrent state that stateful embedding carries from one batch to the next.

Row i of a batch continues row i of the previous batch (bilm-tf's stateful mode). A batch with more
rows than any before grows the state with zero rows; the state is detached when stored, so
gradients never flow across batches.
"""

from typing import Optional

import torch

from .lstm import BiLSTMStack, LSTMState


class CarriedState:
    def __init__(self) -> None:
        self._state: Optional[LSTMState] = None

    def reset(self) -> None:
        self._state = None

    def rows(self, lstm: BiLSTMStack, n_rows: int, device: torch.device) -> LSTMState:
        """The initial state for a batch of `n_rows` rows (views into the carried state)."""
        have = 0 if self._state is None else self._state.h.shape[2]
        if self._state is None or have < n_rows:
            grown = lstm.zero_state(n_rows, device)
            if self._state is not None:
                grown.h[:, :, :have] = self._state.h
                grown.c[:, :, :have] = self._state.c
            self._state = grown
        return LSTMState(self._state.h[:, :, :n_rows], self._state.c[:, :, :n_rows])

    def store(self, final: Optional[LSTMState]) -> None:
        """Keep a batch's final state for the rows it had."""
        if final is None or self._state is None:
            raise ValueError("CarriedState.store needs the final state of a batch started with rows()")
        n_rows = final.h.shape[2]
        self._state.h[:, :, :n_rows] = final.h.detach()
        self._state.c[:, :, :n_rows] = final.c.detach()
