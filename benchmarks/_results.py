"""Where every benchmark puts its figures: benchmarks/results/<name>-<timestamp>.json, kept as the record of
measured runs (`make test` writes its stage tables there too)."""

from __future__ import annotations

import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def save(name: str, result: dict) -> Path:
    """Write result as JSON, print it and where it went, and return the path."""
    out = ROOT / "benchmarks" / "results" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written to {out.relative_to(ROOT)}")
    return out
