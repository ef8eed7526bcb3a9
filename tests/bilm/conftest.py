"""Fixtures of the biLM's tests."""

import json

import pytest


@pytest.fixture(scope="session")
def all_sentences(fixture_dir):
    """Every sentence of the reference fixture, tokenized."""
    data = json.loads((fixture_dir / "sentences.json").read_text())
    return [s.split() for group in data for s in group]
