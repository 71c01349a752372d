"""Canonical JSON: the bytes that are signed (study configs, secure-aggregation messages).

UTF-8, keys sorted, no whitespace, decimals as strings, datetimes as ISO-8601 UTC with a ``Z``
suffix (the serialisers of :mod:`common.params` give decimals and datetimes that form).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

__all__ = ["canonical_json"]


def canonical_json(model: BaseModel | dict[str, Any]) -> bytes:
    """Canonical UTF-8 JSON: sorted keys, no whitespace, decimals as strings, UTC ``Z``."""
    doc = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
