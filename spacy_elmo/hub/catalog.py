"""The catalog of published ELMo models (`catalog.json`): `publisher/model` names (`allennlp/original`,
`efml/ru`, `nlpl/212`) users can give wherever a model is asked for, each with its URLs and public source.
`SPACY_ELMO_CATALOG` names a catalog of one's own that replaces it (a mirror, a test server).

An entry's `urls` are by role (`ARCHIVE_ROLE`, or "options" and "weights"; `COMPANION_ROLES`). A role this
version does not know is left alone (not fetched), so that a newer catalog, or a mirror's, still loads its
models here.
"""

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qsl, urlsplit

from .unpack import is_tarball_name

CATALOG_FILE = Path(__file__).with_name("catalog.json")
CATALOG_ENV = "SPACY_ELMO_CATALOG"
FORMATS = ("bilm-tf", "efml", "tfhub")  # tfhub: a TF-Hub module's tarball (its reader is io/tfhub.py)
ARCHIVE_ROLE = "archive"  # an entry's one file (a zip or a tarball), else "options" and "weights" (bilm-tf's two)
ALIGNMENT_ROLE = "alignment"  # a multilingual model's alignment matrix (torch.save's .pth), beside its weights
COMPANION_ROLES = (ALIGNMENT_ROLE,)  # the files fetched beside a model; any other role is left alone
TFHUB_COMPRESSED = ("tf-hub-format", "compressed")  # tfhub.dev's query for a module as a .tar.gz
NOT_STATED = "not stated"  # the licence of a model whose source states none
# a size as the sources state it ("about 1.5 GB", "650 MB"), in decimal units
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]B)\b", re.IGNORECASE)
_MB_PER_UNIT = {"KB": 1e-3, "MB": 1.0, "GB": 1e3, "TB": 1e6}


@dataclass(frozen=True)
class CatalogEntry:
    """One published model: `urls` and `sha256` (digests a public source states) by role."""

    name: str
    language: str
    format: str
    description: str
    urls: dict[str, str]
    source: dict[str, Any]
    size: Optional[str] = None
    parameters: Optional[str] = None
    nlpl_id: Optional[int] = None
    sha256: dict[str, str] = field(default_factory=dict)

    @property
    def is_tarball(self) -> bool:
        """Whether the entry's archive is a tarball, unpacked into the cache once fetched."""
        return ARCHIVE_ROLE in self.urls and (self.format == "tfhub" or is_tarball_url(self.urls[ARCHIVE_ROLE]))

    @property
    def companions(self) -> dict[str, str]:
        """The URLs of the files fetched beside the model, by role ("alignment")."""
        return {role: url for role, url in self.urls.items() if role in COMPANION_ROLES}

    @property
    def licence(self) -> str:
        """An SPDX id (CC-BY-4.0) or "not stated"; what the source says is in `source["licence_note"]`."""
        return str(self.source.get("licence", NOT_STATED))

    @property
    def evidence(self) -> str:
        """ "primary" (the publisher's own page or code gives the URLs) or "secondary" (another party's)."""
        return str(self.source.get("evidence", "secondary"))

    @property
    def size_mb(self) -> Optional[float]:
        """The download's size in (decimal) megabytes, if the source states one."""
        match = _SIZE.search(self.size or "")
        return float(match.group(1)) * _MB_PER_UNIT[match.group(2).upper()] if match else None

    @property
    def page(self) -> str:
        return str(self.source.get("page", ""))


def catalog_path() -> Path:
    return Path(os.environ.get(CATALOG_ENV) or CATALOG_FILE)


def load_catalog(path: Optional[Path] = None) -> dict[str, CatalogEntry]:
    """The catalog's entries by name: `path`, else `SPACY_ELMO_CATALOG`, else the shipped catalog."""
    return dict(_read_catalog(path or catalog_path())[0])


def other_scheme(url: str) -> Optional[str]:
    """`url` over the other of http and https (the same host, port and path), or None for another scheme."""
    for this, that in (("http://", "https://"), ("https://", "http://")):
        if url[: len(this)].lower() == this:
            return that + url[len(this) :]
    return None


def is_tarball_url(url: str) -> bool:
    """Whether `url` names a tarball: by its path (`.tar.gz`, `.tgz`, `.tar`...), or a TF-Hub module asked
    for compressed (`?tf-hub-format=compressed`, which tfhub.dev answers with a .tar.gz)."""
    parts = urlsplit(url)
    return is_tarball_name(parts.path) or TFHUB_COMPRESSED in parse_qsl(parts.query)


def canonical_url(url: str) -> str:
    """`url` at the address the catalog lists it by (its `url_aliases` map older prefixes to current ones)."""
    for old, new in _read_catalog(catalog_path())[1]:
        if url.startswith(old):
            return new + url[len(old) :]
    return url


@lru_cache(maxsize=4)
def _read_catalog(path: Path) -> tuple[tuple[tuple[str, CatalogEntry], ...], tuple[tuple[str, str], ...]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sources = data.get("sources", {})
        entries = []
        for model in data["models"]:
            source = sources[model["source"]] if isinstance(model["source"], str) else model["source"]
            entries.append((model["name"], CatalogEntry(**{**model, "source": source})))
        aliases = tuple((str(old), str(new)) for old, new in data.get("url_aliases", {}).items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path} ({CATALOG_ENV}, or the shipped catalog) is not a model catalog: {err}") from err
    return tuple(entries), aliases


def find_entry(name: str, catalog: Optional[dict[str, CatalogEntry]] = None) -> Optional[CatalogEntry]:
    """The entry named `name` (case-insensitive), or None."""
    entries = load_catalog() if catalog is None else catalog
    return entries.get(name) or next((e for n, e in entries.items() if n.lower() == name.lower()), None)


def looks_like_name(spec: str, catalog: Optional[dict[str, CatalogEntry]] = None) -> bool:
    """Whether `spec` is written as a catalog name: `publisher/model` with a publisher the catalog knows."""
    entries = load_catalog() if catalog is None else catalog
    publisher, slash, rest = spec.partition("/")
    return bool(slash and rest and "/" not in rest) and publisher.lower() in {n.split("/")[0] for n in entries}


def close_names(name: str, catalog: Optional[dict[str, CatalogEntry]] = None, n: int = 5) -> list[str]:
    """Catalog names close to `name`, best first (a typo, another language code of the same publisher)."""
    entries = load_catalog() if catalog is None else catalog
    lowered = {known.lower(): known for known in entries}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[match] for match in close]


def unknown_name_message(name: str, catalog: Optional[dict[str, CatalogEntry]] = None) -> str:
    close = close_names(name, catalog)
    hint = f"close names: {', '.join(close)}" if close else "`spacy elmo models` lists the names"
    return f"no model {name!r} in the catalog ({catalog_path()}); {hint}"


def entries_for(
    language: Optional[str] = None, catalog: Optional[dict[str, CatalogEntry]] = None
) -> list[CatalogEntry]:
    """The entries, by name, of one language (an ISO 639 code, case-insensitive) or of all."""
    entries = load_catalog() if catalog is None else catalog
    wanted = language.lower() if language else None
    return [entries[n] for n in sorted(entries) if wanted is None or entries[n].language.lower() == wanted]


def entry_for_url(url: str, catalog: Optional[dict[str, CatalogEntry]] = None) -> Optional[CatalogEntry]:
    """The entry one of whose URLs is `url` (or an older address of it)."""
    entries = load_catalog() if catalog is None else catalog
    url = canonical_url(url)
    return next((e for e in entries.values() if url in e.urls.values()), None)
