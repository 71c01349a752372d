"""The error tree matches CONTRACTS.md and messages carry their context.

The tree drawn in docs/CONTRACTS.md is checked against every exception class defined in a
module of common/, coordinator/ and participant/ (all imported), both ways: name, parent,
module and HTTP status.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from common import errors
from common.budget import PrivacyBudget

TREE = [
    (errors.InvalidInput, errors.FedodError, 422),
    (errors.SchemaMismatch, errors.InvalidInput, 422),
    (errors.PayloadInvalid, errors.InvalidInput, 422),
    (errors.PayloadTooLarge, errors.PayloadInvalid, 413),
    (errors.NotFound, errors.FedodError, 404),
    (errors.Conflict, errors.FedodError, 409),
    (errors.BudgetExceeded, errors.Conflict, 409),
    (errors.ConfigVersionConflict, errors.Conflict, 409),
    (errors.IdempotencyConflict, errors.Conflict, 409),
    (errors.ConfigError, errors.FedodError, 422),
    (errors.SignatureInvalid, errors.ConfigError, 422),
    (errors.ConfigExpired, errors.ConfigError, 422),
    (errors.ConfigDowngrade, errors.ConfigError, 422),
    (errors.CoordinatorUnavailable, errors.FedodError, 503),
]


@pytest.mark.parametrize(("cls", "parent", "status"), TREE)
def test_tree_and_status(cls: type[errors.FedodError], parent: type, status: int) -> None:
    assert issubclass(cls, parent)
    assert cls.status_code == status


EXIT_CODES = [
    (errors.FedodError, 1), (errors.InvalidInput, 3), (errors.SchemaMismatch, 3),
    (errors.SecureSumRejected, 3), (errors.ConfigError, 4), (errors.SignatureInvalid, 4),
    (errors.BudgetExceeded, 5), (errors.CoordinatorUnavailable, 6), (errors.NotFound, 7),
    (errors.Conflict, 7), (errors.ConfigVersionConflict, 7), (errors.IdempotencyConflict, 7),
]


@pytest.mark.parametrize(("cls", "code"), EXIT_CODES)
def test_exit_code_on_each_class(cls: type[errors.FedodError], code: int) -> None:
    assert cls.exit_code == code


def test_context_is_kept() -> None:
    exc = errors.PayloadInvalid("digest mismatch; re-encode the counts", field="lsh")
    assert str(exc) == "digest mismatch; re-encode the counts"
    assert exc.context == {"field": "lsh"}


def test_budget_exceeded_says_spent_asked_cap() -> None:
    spent, asked, cap = PrivacyBudget("0.9"), PrivacyBudget("0.2"), PrivacyBudget(1)
    exc = errors.BudgetExceeded(spent=spent, asked=asked, cap=cap, participant="h1")
    assert exc.spent == spent and exc.asked == asked and exc.cap == cap
    assert exc.context["participant"] == "h1"
    with pytest.raises(errors.Conflict, match=r"spent \(epsilon=0.9.*asks \(epsilon=0.2.*cap"):
        raise exc


# --- the tree in docs/CONTRACTS.md against every error class the packages define -------------

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
PACKAGES = ("common", "coordinator", "participant")
ERRORS_MODULE = "common/errors.py"
# a class line of the drawing: tree characters, Name(Parent), an optional [module path]
CLASS_LINE = re.compile(r"^[\s│├└─]*([A-Z]\w*)\((\w+)\)(?:\s+\[([\w/.]+\.py)\])?")
STATUS_MARK = re.compile(r"\(-> (\d{3})\)")


@dataclass(frozen=True)
class Documented:
    parent: str
    module: str
    status: int | None  # the `(-> N)` mark on the class's lines, if any


def _blocks_of_errors_section() -> list[str]:
    """The fenced blocks of the `## common/errors.py` section: the tree, then the list of
    exceptions outside it."""
    text = CONTRACTS.read_text(encoding="utf-8")
    section = text.split("\n## common/errors.py\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```")[1::2]


def _documented(block: str) -> dict[str, Documented]:
    found: dict[str, Documented] = {}
    current: str | None = None
    for line in block.splitlines():
        match = CLASS_LINE.match(line)
        if match:
            current, parent, module = match.groups()
            assert current not in found, f"{current} is drawn twice in {CONTRACTS.name}"
            found[current] = Documented(parent, module or ERRORS_MODULE, None)
        mark = STATUS_MARK.search(line)
        if mark and current is not None:
            found[current] = Documented(found[current].parent, found[current].module,
                                        int(mark.group(1)))
    return found


def _defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of common/, coordinator/ or participant/
    (imported, so a class added anywhere is found), by name."""
    classes: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        # the folder itself, not `package.__path__`: under pytest the top-level name may be
        # the namespace package of the tests folder of the same name
        for info in pkgutil.walk_packages([str(ROOT / package)], f"{package}."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if (inspect.isclass(obj) and issubclass(obj, BaseException)
                        and obj.__module__ == module.__name__):
                    assert obj.__name__ not in classes, f"two error classes named {obj.__name__}"
                    classes[obj.__name__] = obj
    return classes


def _where(cls: type) -> str:
    return Path(inspect.getfile(cls)).resolve().relative_to(ROOT).as_posix()


def _as_documented(cls: type) -> tuple[str, str]:
    return cls.__bases__[0].__name__, _where(cls)


DEFINED = _defined_exceptions()
TREE_BLOCK, OUTSIDE_BLOCK = _blocks_of_errors_section()[:2]
IN_TREE = _documented(TREE_BLOCK)
OUTSIDE = _documented(OUTSIDE_BLOCK)


def test_every_error_class_of_the_packages_is_in_the_contracts_tree() -> None:
    code = {name: _as_documented(cls) for name, cls in DEFINED.items()
            if issubclass(cls, errors.FedodError)}
    doc = {name: (d.parent, d.module) for name, d in IN_TREE.items()}
    assert set(code) - set(doc) == set(), "error classes missing from docs/CONTRACTS.md's tree"
    assert set(doc) - set(code) == set(), "classes in docs/CONTRACTS.md's tree the code lacks"
    assert doc == code, "parent or module differs between docs/CONTRACTS.md and the code"


def test_every_other_exception_class_is_listed_outside_the_tree() -> None:
    code = {name: _as_documented(cls) for name, cls in DEFINED.items()
            if not issubclass(cls, errors.FedodError)}
    doc = {name: (d.parent, d.module) for name, d in OUTSIDE.items()}
    assert doc == code, "docs/CONTRACTS.md's list of exceptions outside the tree is not the code's"


@pytest.mark.parametrize("name", sorted(IN_TREE))
def test_the_tree_marks_each_status_that_differs_from_its_parents(name: str) -> None:
    cls = DEFINED[name]
    parent = cls.__bases__[0]
    mark = IN_TREE[name].status
    if mark is not None:
        assert cls.status_code == mark
    elif issubclass(parent, errors.FedodError):
        assert cls.status_code == parent.status_code, f"{name}: mark (-> {cls.status_code})"
