"""How every bench script ends: its report as JSON on stdout, and in --json's file when given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(report: Any, json_path: Path | None) -> None:
    text = json.dumps(report, indent=2)
    print(text)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text + "\n")
