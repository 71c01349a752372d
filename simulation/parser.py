"""The command line of ``fedod-simulate``: its options and their checks."""

from __future__ import annotations

import argparse
from decimal import Decimal

from simulation import demo_data as dd
from simulation.stream import add_arguments as stream_arguments


def positive_decimal(text: str) -> str:
    try:
        ok = Decimal(text) > 0
    except ArithmeticError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The options of ``fedod-simulate`` (``--stream``'s from :mod:`simulation.stream`)."""
    p = argparse.ArgumentParser(
        prog="fedod-simulate",
        description="Run a coordinator and N hospitals as real processes on this machine, "
        "split a real medical dataset across them, and compare AUC alone / federated "
        "(private) / centralised (non-private).",
    )
    p.add_argument("--hospitals", type=int, default=3, help="number of hospitals, >= 2 (3)")
    p.add_argument(
        "--epsilon",
        default="1.0",
        type=positive_decimal,
        help="epsilon each hospital spends on its one release, LSH + grid (1.0)",
    )
    p.add_argument(
        "--cap-releases",
        type=int,
        default=3,
        help="each hospital's cap, in releases of --epsilon (3)",
    )
    p.add_argument(
        "--dataset",
        help="CSV with a header, numeric features and a 0/1 label "
        "column (default: scikit-learn's bundled breast cancer data)",
    )
    p.add_argument("--label-column", default=dd.LABEL_COLUMN, help="label column (label)")
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="seed of the split and of the "
        "non-private baselines (7); privacy noise is never seeded",
    )
    p.add_argument("--database-url", help="coordinator database (default: SQLite in workdir)")
    p.add_argument("--workdir", help="where data, state and score files go (default: temp)")
    p.add_argument("--port", type=int, default=0, help="coordinator port (default: free)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="keep the coordinator running afterwards (Ctrl-C stops it)",
    )
    p.add_argument(
        "--aggregation",
        choices=("secure", "independent"),
        help="secure: one release round with secure aggregation and one noise draw on the sum "
        "(LSH tables only; default from 3 hospitals up); independent: every hospital adds its "
        "own full noise (default for 2)",
    )
    stream_arguments(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--export", metavar="DIR", help="only write DIR/study.json and each "
                   "hospital's DIR/<hospital>/data.csv (for docker-compose), then exit")
    return p
