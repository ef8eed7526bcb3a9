"""An LRU cache of token-layer vectors keyed by character ids (exact: the layer is context-free), in one
device tensor; cleared whenever a parameter of the encoder changes, so it never serves stale vectors.
"""

from collections import OrderedDict

import numpy
import torch

from ._torch_private import tensor_state
from .precision import Products


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

    def encode(self, unique_ids: torch.Tensor, encoder: torch.nn.Module, products: Products) -> torch.Tensor:
        """Vectors of distinct token rows (n, chars): cached ones gathered, the rest encoded and stored; the cache
        empties when the encoder's weights or the products' kernels change."""
        weights_key = (products.kernels, *(tensor_state(p) for p in encoder.parameters()))
        if weights_key != self._weights_key:
            self._slots.clear()
            self._store = torch.empty(0)
            self._weights_key = weights_key
        rows = unique_ids.detach().to("cpu").numpy()
        keys = [row.tobytes() for row in numpy.ascontiguousarray(rows, dtype=numpy.int32)]
        slots = [self._slots.get(key) for key in keys]  # the rows are distinct: so are their keys
        hit_positions = [position for position, slot in enumerate(slots) if slot is not None]
        hit_slots = [slot for slot in slots if slot is not None]
        miss_positions = [position for position, slot in enumerate(slots) if slot is None]
        for position in hit_positions:
            self._slots.move_to_end(keys[position])
        self.hits += len(hit_positions)
        self.misses += len(miss_positions)
        device = unique_ids.device
        misses = torch.tensor(miss_positions, dtype=torch.long, device=device)
        fresh = encoder(unique_ids[misses], products) if miss_positions else None
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
            full = len(self._slots) >= self.max_size  # then the least recently used is evicted
            slots.append(self._slots.popitem(last=False)[1] if full else len(self._slots))
            self._slots[key] = slots[-1]
        self._store[torch.tensor(slots, device=vectors.device)] = vectors
