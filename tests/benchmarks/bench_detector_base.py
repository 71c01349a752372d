"""What subclassing PyOD's BaseDetector would cost a participant, next to what fedod pays now.

Prints (markdown) the installed size of the distributions PyOD would add to fedod's runtime
dependencies, and the import times (median of fresh interpreters) of the detectors, of
scikit-learn's base class, of PyOD's base class on top of the detectors, and of OpenDP's
prelude against the OpenDP submodules ``common.histograms.release`` needs. Needs the test extra
(PyOD).

    .venv/bin/python tests/benchmarks/bench_detector_base.py [--runs 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from importlib import metadata

TIMER = ("import time; t = time.perf_counter(); {before}; t0 = time.perf_counter(); {stmt};"
         " print(time.perf_counter() - t0)")
IMPORTS = {
    "common.detectors (today)": ("pass", "import common.detectors"),
    "sklearn.base alone": ("pass", "import sklearn.base"),
    "+ pyod.models.base after common.detectors": ("import common.detectors",
                                                  "import pyod.models.base"),
    "opendp.prelude (common.histograms.release before)": ("pass", "import opendp.prelude"),
    "opendp submodules common.histograms.release uses": (
        "pass", "import opendp.measurements, opendp.domains, opendp.metrics, opendp.mod"),
}


def _name(requirement: str) -> str | None:
    if "extra ==" in requirement:
        return None
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    return match.group(0).lower().replace("_", "-") if match else None


def closure(root: str) -> set[str]:
    """``root`` and every distribution it needs (no extras), as installed here."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo.extend(n for n in map(_name, reqs) if n)
    return seen


def size_mb(dist: str) -> float:
    files = metadata.distribution(dist).files or []
    return sum(f.size or 0 for f in files) / 2**20


def import_seconds(before: str, stmt: str, runs: int) -> float:
    code = TIMER.format(before=before, stmt=stmt)
    times = [float(subprocess.run([sys.executable, "-c", code], check=True,
                                  capture_output=True, text=True).stdout) for _ in range(runs)]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per import")
    args = parser.parse_args()
    fedod = closure("fedod")
    added = sorted(closure("pyod") - fedod)
    sizes = {d: size_mb(d) for d in added}
    print("## Detector base class: PyOD's or scikit-learn's\n")
    print("| PyOD would add | MB |\n| --- | ---: |")
    for dist, mb in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"| {dist} {metadata.version(dist)} | {mb:.1f} |")
    runtime = sum(size_mb(d) for d in fedod if d != "fedod")
    print(f"| **total** (fedod's runtime dependencies: {runtime:.0f} MB) |"
          f" **{sum(sizes.values()):.1f}** |\n")
    print(f"| import (median of {args.runs} fresh interpreters) | s |\n| --- | ---: |")
    for label, (before, stmt) in IMPORTS.items():
        print(f"| {label} | {import_seconds(before, stmt, args.runs):.3f} |")


if __name__ == "__main__":
    main()
