"""Where the committed test data lives (one copy, for conftest.py and for module-level test tables)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
ELMO_FIXTURE = FIXTURES / "elmo-fixture"
SPACY_FIXTURES = FIXTURES / "spacy"
