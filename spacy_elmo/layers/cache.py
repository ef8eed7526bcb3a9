"""A bounded LRU cache of biLM layer outputs, keyed by a doc's text, tokens and sentence boundaries: with a
frozen biLM a training doc's layers are the same every epoch, in new Doc objects (hence a content key).
"""

import hashlib
from collections import OrderedDict
from typing import Any, Optional

from spacy.tokens import Doc


def doc_key(doc: Doc) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    h.update(doc.text.encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    for token in doc:
        h.update(len(token.text).to_bytes(4, "little"))
        h.update(token.text.encode("utf-8", "surrogatepass"))
    if len(doc) and doc.has_annotation("SENT_START"):
        h.update(b"\x01" + bytes(1 if t.is_sent_start else 0 for t in doc))
    return h.digest()


class LayerCache:
    """key -> array (numpy or cupy), bounded by the total size of the arrays in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, Any] = OrderedDict()
        self.n_bytes = 0

    def get(self, key: bytes) -> Optional[Any]:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: bytes, value: Any) -> None:
        size = int(value.nbytes)
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.n_bytes -= int(old.nbytes)
        self._entries[key] = value
        self.n_bytes += size
        while self.n_bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.n_bytes -= int(evicted.nbytes)

    def clear(self) -> None:
        self._entries.clear()
        self.n_bytes = 0
