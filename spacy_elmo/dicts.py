"""Nested settings compared key by key: which dotted keys differ between what was recorded and what is
given now (a resumed run's config, a model's stored options, a resumable output's settings)."""

from collections.abc import Iterable, Mapping
from typing import Any


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c": 2} -> {"a.b": 1, "c": 2}."""
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        if isinstance(inner, Mapping):
            flat.update(flatten(inner, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = inner
    return flat


def same_value(a: Any, b: Any) -> bool:
    """Equal and of one kind: 3 and 3.0 are one number, True and 1 are not, a tuple equals its list (JSON
    and msgpack give lists back)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
        return a == b
    return type(a) is type(b) and a == b


def changed_keys(recorded: Mapping[str, Any], current: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[str]:
    """The dotted keys, sorted, whose values differ between two nested dicts (a key in one only is changed)."""
    then, now = flatten(recorded), flatten(current)
    skipped = set(ignore)
    return [
        key
        for key in sorted(set(then) | set(now))
        if key not in skipped and (key not in then or key not in now or not same_value(then[key], now[key]))
    ]
