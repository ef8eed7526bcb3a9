"""Which components listen to an `elmo` pipe: spaCy's ListenedToComponent protocol.

`Language` calls `find_listeners` for every component after the pipe (on add_pipe, initialize and
loading), and `nlp.replace_listeners` uses `listener_map` / `remove_listener`. Kept apart from the pipe
so that the pipe's own code is about embedding docs.
"""

from typing import Optional

from thinc.api import Model

from .layers.listener import ElmoListener


class ListenerBookkeeping:
    """Mixin: `name` and `listener_dims()` come from the pipe."""

    name: str
    listener_map: dict[str, list[ElmoListener]]

    def _init_listeners(self) -> None:
        self.listener_map = {}

    @property
    def listeners(self) -> list[ElmoListener]:
        """Every listener, in the order of the components they belong to."""
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> list[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream_dims = self.listener_dims
        dims = self.known_listener_dims()
        if dims is not None:
            listener.set_upstream_dims(*dims)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            return True
        return False

    def find_listeners(self, component) -> None:
        """Register every ElmoListener in `component`'s model whose upstream is this pipe (or "*")."""
        names = ("*", self.name)
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if isinstance(node, ElmoListener) and node.upstream_name in names:
                    self.add_listener(node, component.name)

    # provided by the pipe
    def listener_dims(self) -> tuple[int, int]:  # pragma: no cover
        raise NotImplementedError

    def known_listener_dims(self) -> Optional[tuple[int, int]]:  # pragma: no cover
        raise NotImplementedError
