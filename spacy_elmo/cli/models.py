"""`spacy elmo models [--lang X]`: the published models the catalog names; `spacy elmo download NAME|URL`:
one fetched into the cache ahead of time (on a machine with network access, for one without: copy the cache
folder and point SPACY_ELMO_CACHE at it)."""

from pathlib import Path
from typing import Optional

import typer

from ..hub.catalog import catalog_path, entries_for, find_entry, load_catalog, unknown_name_message
from ..hub.download import CACHE_ENV, cache_dir, download_entry, download_url, is_cached, is_url
from . import elmo_cli, one_line_errors

CACHE_OPTION = typer.Option(
    None, "--cache", help=f"The cache folder (default: ${CACHE_ENV}, else the user cache folder: ~/.cache/spacy-elmo)"
)


@elmo_cli.command("models")
def models_cli(
    lang: Optional[str] = typer.Option(None, "--lang", help="Only this language (an ISO 639 code: en, ru, nb, grc)"),
    cache: Optional[Path] = CACHE_OPTION,
) -> None:
    """List the published ELMo models by name (allennlp/original, efml/ru, nlpl/212), which every command and
    the pipe's `path` take, with their parameters and download size where known; * marks those in the cache.
    Each name's source and licence: `--lang` and the catalog file printed at the end."""
    with one_line_errors():
        folder = cache_dir(cache)  # first: the default folder needs pooch, named before any line is listed
        entries = entries_for(lang)
        if not entries:
            languages = sorted({entry.language for entry in load_catalog().values()})
            raise ValueError(f"no model for language {lang!r} in the catalog; its languages: {', '.join(languages)}")
        # one column a quantity: parameters (the model's size) apart from the download's size, "-" where unknown
        typer.echo(f"  {'name':22} {'lang':4} {'format':8} {'params':7} {'download':13} description")
        for entry in entries:
            mark = "*" if is_cached(entry, cache) else " "
            params, download = entry.parameters or "-", entry.size or "-"
            columns = f"{entry.name:22} {entry.language:4} {entry.format:8} {params:7} {download:13}"
            typer.echo(f"{mark} {columns} {entry.description}")
            if lang:
                typer.echo(f"    source: {entry.page}; licence: {entry.licence}")
        typer.echo(f"catalog: {catalog_path()}; cache: {folder}", err=True)


@elmo_cli.command("download")
def download_cli(
    model: str = typer.Argument(
        ..., help="A catalog name (spacy elmo models lists them) or the http(s) URL of a model's archive or weights"
    ),
    cache: Optional[Path] = CACHE_OPTION,
) -> None:
    """Fetch MODEL into the cache now (resumed if an earlier try broke off; a cached one is only checked) and
    print its local path. A URL of a weights file brings its options too (X_weights.hdf5 -> X_options.json,
    else options.json beside it). Offline (SPACY_ELMO_OFFLINE=1), nothing is fetched: a cached model is
    checked, a missing one named."""
    with one_line_errors():
        if is_url(model):
            path = download_url(model, cache)
        else:
            entry = find_entry(model)
            if entry is None:
                raise FileNotFoundError(unknown_name_message(model))
            path = download_entry(entry, cache)
        typer.echo(str(path))
