"""`spacy elmo models [--lang X] [--format F] [--licence L] [--json]`: the published models the catalog
names; `spacy elmo download NAME|URL`: one fetched into the cache ahead of time (on a machine with network
access, for one without: copy the cache folder and point SPACY_ELMO_CACHE at it)."""

import json
from pathlib import Path
from typing import Optional

import typer

from ..hub.catalog import (
    FORMATS,
    CatalogEntry,
    catalog_path,
    entries_for,
    find_entry,
    load_catalog,
    unknown_name_message,
)
from ..hub.download import CACHE_ENV, cache_dir, download_entry, download_url, is_cached, is_url
from . import elmo_cli, one_line_errors

CACHE_OPTION = typer.Option(
    None, "--cache", help=f"The cache folder (default: ${CACHE_ENV}, else the user cache folder: ~/.cache/spacy-elmo)"
)


@elmo_cli.command("models")
def models_cli(
    lang: Optional[str] = typer.Option(None, "--lang", help="Only this language (an ISO 639 code: en, ru, nb, grc)"),
    format_: Optional[str] = typer.Option(None, "--format", help=f"Only this format ({', '.join(FORMATS)})"),
    licence: Optional[str] = typer.Option(
        None, "--licence", help='Only this licence (an SPDX id such as CC-BY-4.0, or "not stated"; case-insensitive)'
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON array of the entries, for tools"),
    cache: Optional[Path] = CACHE_OPTION,
) -> None:
    """List the published ELMo models by name (allennlp/original, efml/ru, nlpl/212), which every command and
    the pipe's `path` take: language, format, parameters, download size in MB where the source states it,
    licence; * marks those in the cache. `--lang` adds each one's source; `--json` gives every field."""
    with one_line_errors():
        folder = cache_dir(cache)  # first: the default folder needs pooch, named before any line is listed
        entries = _chosen(lang, format_, licence)
        if as_json:
            typer.echo(json.dumps([_as_record(entry, is_cached(entry, cache)) for entry in entries], indent=2))
            return
        # one column a quantity: parameters (the model's size) apart from the download's size, "-" where unknown
        typer.echo(f"  {'name':24} {'lang':4} {'format':8} {'params':7} {'MB':>6} {'licence':12} description")
        for entry in entries:
            mark = "*" if is_cached(entry, cache) else " "
            megabytes = entry.size_mb
            size = f"{megabytes:.0f}" if megabytes is not None else "-"
            columns = f"{entry.name:24} {entry.language:4} {entry.format:8} {entry.parameters or '-':7} {size:>6}"
            short_licence = entry.licence if len(entry.licence) <= 12 else entry.licence[:11] + "~"
            typer.echo(f"{mark} {columns} {short_licence:12} {entry.description}")
            if lang:
                typer.echo(f"    source: {entry.page} ({entry.evidence})")
        typer.echo(f"{len(entries)} models; catalog: {catalog_path()}; cache: {folder}", err=True)


def _chosen(lang: Optional[str], format_: Optional[str], licence: Optional[str]) -> list[CatalogEntry]:
    """The entries of `lang`, `format_` and `licence` (each, if given); none is refused naming those there are."""
    if format_ is not None and format_.lower() not in FORMATS:
        raise ValueError(f"no format {format_!r}: the catalog's formats are {', '.join(FORMATS)}")
    of_language = entries_for(lang)
    if not of_language:
        languages = sorted({entry.language for entry in load_catalog().values()})
        raise ValueError(f"no model for language {lang!r} in the catalog; its languages: {', '.join(languages)}")
    entries = [
        entry
        for entry in of_language
        if (format_ is None or entry.format == format_.lower())
        and (licence is None or entry.licence.lower() == licence.strip().lower())
    ]
    if not entries:
        licences = sorted({entry.licence for entry in load_catalog().values()})
        given = (("language", lang), ("format", format_), ("licence", licence))
        asked = ", ".join(f"{what} {value!r}" for what, value in given if value)
        raise ValueError(f"no model in the catalog with {asked}; its licences: {', '.join(licences)}")
    return entries


def _as_record(entry: CatalogEntry, cached: bool) -> dict[str, object]:
    return {
        "name": entry.name,
        "language": entry.language,
        "format": entry.format,
        "licence": entry.licence,
        "parameters": entry.parameters,
        "size": entry.size,
        "size_mb": entry.size_mb,
        "description": entry.description,
        "urls": entry.urls,
        "nlpl_id": entry.nlpl_id,
        "source": {key: entry.source.get(key) for key in ("page", "publisher", "evidence", "licence_note")},
        "cached": cached,
    }


@elmo_cli.command("download")
def download_cli(
    model: str = typer.Argument(
        ...,
        help="A catalog name (spacy elmo models lists them) or the http(s) URL of a model's archive (zip or tarball) "
        "or weights",
    ),
    cache: Optional[Path] = CACHE_OPTION,
) -> None:
    """Fetch MODEL into the cache now (resumed if an earlier try broke off; a cached one is only checked) and
    print its local path: a tarball's unpacked folder, a two-file model's folder (with its alignment matrix,
    for an aligned multilingual model). A URL of a weights file brings its options too (X_weights.hdf5 ->
    X_options.json, else options.json beside it). Offline (SPACY_ELMO_OFFLINE=1), nothing is fetched: a
    cached model is checked, a missing one named."""
    with one_line_errors():
        if is_url(model):
            path = download_url(model, cache)
        else:
            entry = find_entry(model)
            if entry is None:
                raise FileNotFoundError(unknown_name_message(model))
            path = download_entry(entry, cache)
        typer.echo(str(path))
