"""Published ELMo models by name or URL: the catalog (`catalog.json`, `catalog.py`) and the cached, verified
download (`download.py`; where each URL lives in the cache: `keys.py`; what a file must read as when no
digest vouches for it: `checks.py`). No HTTP library is imported until a download happens."""

from .download import DownloadError, resolve_model_source
