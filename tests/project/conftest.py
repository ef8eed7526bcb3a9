"""The project's scripts are plain files under project/scripts: make them importable for tests."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "project" / "scripts"
ASSETS = REPO / "assets"

if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
