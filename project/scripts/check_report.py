"""How every project check ends: its report as JSON, its summary line, and a failing exit status.

A step of `spacy project run` fails only through its exit status, so a check that finds a mismatch must
exit non-zero after writing the report that says what differed.
"""

import json
import sys
from pathlib import Path
from typing import Any


def finish_check(report: dict[str, Any], output: Path) -> None:
    """Write `report` (with "summary" and "passed") to `output`, print the summary, exit 1 if it failed."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(report["summary"])
    if not report["passed"]:
        sys.exit(1)
