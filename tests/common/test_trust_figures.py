"""docs/TRUST.md's figures come from the code: the loss table from
common.noise.accounting, the degree table from common.secagg.graph, and every test the threat
table names exists."""

from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path

import pytest

from common.noise.accounting import loss_with_honest_shares, share_sum_sd
from common.secagg.graph import graph_degree, graph_delta, recovery_failure, share_threshold
from common.secagg.params import AggregationParams

ROOT = Path(__file__).resolve().parents[2]
TRUST = (ROOT / "docs" / "TRUST.md").read_text()


def _rows(heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading``."""
    text = TRUST[TRUST.index(heading):]
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    table = []
    for ln in lines[2:]:
        table.append([c.strip() for c in ln.strip("|").split("|")])
        if text.index(ln) > text.index(lines[0]) and not text[text.index(ln) + len(ln) + 1:] \
                .startswith("|"):
            break
    return table


def test_the_loss_table_is_what_the_accounting_computes():
    rows = _rows("### Loss when fewer honest shares remain")
    assert len(rows) == 7
    for n, eps, m, h_min, shares, sd, loss in rows:
        args = (eps, int(m), int(h_min), int(shares))
        assert f"{share_sum_sd(*args):.2f}" == sd
        assert f"{loss_with_honest_shares(*args):.2f}" == loss
        assert int(h_min) <= int(n)


def test_the_loss_at_full_shares_is_epsilon_and_grows_as_shares_go():
    losses = [loss_with_honest_shares("1", 10, 9, s) for s in range(9, 0, -1)]
    assert losses[0] == 1.0
    assert all(a < b for a, b in zip(losses, losses[1:], strict=False))
    assert losses[-1] > 9  # more than the factor rule h_min / shares would say


def test_the_degree_table_is_the_graph_rules():
    for row in _rows("At `D = T = 5 %` of n:"):
        n = int(row[0].split()[0].replace(",", ""))
        d = t = n * 5 // 100
        k = graph_degree(n, d, t)
        assert row[1].split()[0] == str(k)
        assert row[2] == str(share_threshold(n, d, t, k))
        bound = float(graph_delta(n, d, t))
        assert row[3].split()[0] == ("0" if bound == 0 else f"{bound:.1e}")
        if n <= 1000:
            charged = AggregationParams(mode="secure", cohort_size=n, max_dropouts=d,
                                        max_colluders=t).graph_delta
            assert row[4] == ("0" if charged == 0 else f"{float(charged):.1e}")
        else:
            assert row[4] == f"{float(Decimal(8) * Decimal(bound)):.1e}"
        stall = float(recovery_failure(n, d, t))
        assert row[5] == ("0" if stall == 0 else f"{stall:.2g}")


@pytest.mark.parametrize("ref", sorted(set(re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`",
                                                       TRUST))))
def test_every_test_the_threat_table_names_exists(ref):
    path, name = ref
    source = (ROOT / path).read_text()
    if name:
        names = {f.name for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef)}
        assert name in names, f"{path} has no {name}"
