"""Canonical JSON: the bytes that are signed (study configs, secure-aggregation messages).

UTF-8, keys sorted, no whitespace, decimals as strings, datetimes as ISO-8601 UTC with a ``Z``
suffix (the serialisers of :mod:`common.study.params` give decimals and datetimes that form).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["CANONICAL", "canonical_json", "is_canonical", "parse_canonical"]

M = TypeVar("M", bound=BaseModel)

CANONICAL: dict[str, Any] = {"canonical": True}
"""Pydantic context of the canonical form, for serialising and for parsing: a section may
leave out keys at the values they had when the section was first signed
(``common.online.params``), and a parse of canonical bytes reads a missing key as that value,
not as today's default."""


def is_canonical(context: object) -> bool:
    """Whether a pydantic ``info.context`` is the canonical form's."""
    return isinstance(context, dict) and context.get("canonical") is True


def canonical_json(model: BaseModel | dict[str, Any]) -> bytes:
    """Canonical UTF-8 JSON: sorted keys, no whitespace, decimals as strings, UTC ``Z``."""
    doc = (model.model_dump(mode="json", context=CANONICAL) if isinstance(model, BaseModel)
           else model)
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def parse_canonical(model: type[M], payload: str | bytes) -> M:
    """``payload`` (canonical bytes, as signed) parsed as ``model``: keys a section leaves out
    stand for the values they had when it was first signed."""
    return model.model_validate_json(payload, context=CANONICAL)
