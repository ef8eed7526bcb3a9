"""metrics.jsonl: one JSON object a line, {"type": "train" | "eval", "step", "tokens", ...}."""

import json
from pathlib import Path
from typing import Any


class MetricsLog:
    """metrics.jsonl, append-only; on resume, records after the resumed step are dropped, so that a
    resumed run's file reads as if the run had never stopped."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path = path
        self.enabled = enabled

    def truncate_after(self, step: int) -> None:
        if not self.enabled or not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
