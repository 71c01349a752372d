"""What every ``fedod-participant`` subcommand does with its parsed arguments: the data
options they name, and printing a result as text or ``--json``."""

from __future__ import annotations

import argparse
import json
from decimal import Decimal
from typing import Any

from common.budget import PrivacyBudget, plain_decimal
from participant.agent import DataOptions


def json_value(value: Any) -> Any:
    """JSON for values json does not know: decimals as plain decimal strings ("0", "1.5",
    never "0E-18" or "1.000000000"), budgets as their two numbers, the rest as text."""
    if isinstance(value, Decimal):
        return plain_decimal(value)
    if isinstance(value, PrivacyBudget):
        return {"epsilon": json_value(value.epsilon), "delta": json_value(value.delta)}
    return str(value)


def count(n: int, noun: str) -> str:
    """``1 contributor``, ``2 contributors``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def out(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    print(json.dumps(doc, default=json_value) if args.json else text)


def options(args: argparse.Namespace) -> DataOptions:
    if args.scheduler and args.engine != "dask":
        raise ValueError("--scheduler needs --engine dask")
    return DataOptions(args.id_column, tuple(args.ignore_column), args.out_of_bounds,
                       args.chunk_rows, args.progress, getattr(args, "rows_per_id", None),
                       args.engine, args.scheduler)
