"""Writing a benchmark's results: where they go, the machine they ran on, JSON, markdown tables, plots."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root."""
RESULTS = ROOT / "bench" / "results"


def machine_info() -> dict[str, Any]:
    """CPU, memory, load average and library versions: what a reader needs to compare runs."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem_gb = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    versions: dict[str, str] = {}
    for pkg in ("numpy", "torch", "sentence-transformers", "qdrant-edge-py", "qdrant-client", "tantivy", "pydantic"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A GitHub markdown table as lines."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def plot_style() -> Any:
    """matplotlib (Agg backend) with the benchmarks' common style; returns ``pyplot``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 9,
            "legend.fontsize": 8,
        }
    )
    return plt

