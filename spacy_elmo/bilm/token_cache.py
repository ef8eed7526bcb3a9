"""An LRU cache of token-layer vectors keyed by character ids (exact: the layer is context-free), in one
device tensor; cleared whenever a parameter of the encoder changes, so it never serves stale vectors.
"""

from collections import OrderedDict
from typing import Callable

import numpy
import torch

from ._torch_private import tensor_state


class TokenCache:
    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"token cache size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._slots: OrderedDict[bytes, int] = OrderedDict()
        self._store: torch.Tensor = torch.empty(0)
        self._weights_key: tuple = ()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()
        self._store = torch.empty(0)

    def _check_weights(self, module: torch.nn.Module, kernels: str) -> None:
        key = (kernels, *(tensor_state(p) for p in module.parameters()))
        if key != self._weights_key:
            self.clear()
            self._weights_key = key

    def encode(
        self,
        unique_ids: torch.Tensor,
        module: torch.nn.Module,
        encoder: Callable[[torch.Tensor], torch.Tensor],
        kernels: str = "torch",
    ) -> torch.Tensor:
        """Vectors of distinct token rows (n, chars): cached ones gathered, the rest encoded and stored; the
        cache empties when the module's weights or `kernels` (`Products.kernels`) change."""
        self._check_weights(module, kernels)
        rows = unique_ids.detach().to("cpu").numpy()
        keys = [row.tobytes() for row in numpy.ascontiguousarray(rows, dtype=numpy.int32)]
        hit_positions: list[int] = []
        hit_slots: list[int] = []
        miss_positions: list[int] = []
        for position, key in enumerate(keys):
            slot = self._slots.get(key)
            if slot is None:
                miss_positions.append(position)
            else:
                self._slots.move_to_end(key)
                hit_positions.append(position)
                hit_slots.append(slot)
        self.hits += len(hit_positions)
        self.misses += len(miss_positions)
        device = unique_ids.device
        misses = torch.tensor(miss_positions, dtype=torch.long, device=device)
        fresh = encoder(unique_ids[misses]) if miss_positions else None
        template = fresh if fresh is not None else self._store
        out = template.new_empty(len(keys), template.shape[-1])
        if hit_positions:
            out[torch.tensor(hit_positions, device=device)] = self._store[torch.tensor(hit_slots, device=device)]
        if fresh is not None:
            out[misses] = fresh
            self._insert([keys[p] for p in miss_positions], fresh)
        return out

    def _insert(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        if self._store.numel() == 0 or self._store.dtype != vectors.dtype or self._store.device != vectors.device:
            self._slots.clear()
            self._store = vectors.new_empty(self.max_size, vectors.shape[-1])
        # Only the most recent max_size of this batch's misses can stay.
        keys, vectors = keys[-self.max_size :], vectors[-self.max_size :]
        slots: list[int] = []
        for key in keys:
            if len(self._slots) < self.max_size:
                slots.append(len(self._slots))
            else:
                _, slot = self._slots.popitem(last=False)  # evict the least recently used
                slots.append(slot)
            self._slots[key] = slots[-1]
        self._store[torch.tensor(slots, device=vectors.device)] = vectors
