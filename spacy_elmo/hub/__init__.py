"""Published ELMo models by name or URL: the catalog (`catalog.json`, `catalog.py`) and the cached, verified
download (`download.py`). No HTTP library is imported until a download happens."""

from .download import DownloadError, resolve_model_source
