"""Domain errors shared by coordinator, participant and the pure code in ``common``.

Our exception hierarchy::

    FedodError
    ├── InvalidInput                  bad data or parameters from a caller      (422)
    │   ├── SchemaMismatch            data or shape does not match the study schema
    │   ├── PayloadInvalid            encoded counts: base64, digest, dtype, shape, range
    │   │   ├── PayloadTooLarge       encoded or decoded counts over the size limit (413)
    │   │   └── ReleaseOutOfBounds    a released value past its public poisoning bound
    │   │       └── SecureSumRejected a revealed secure sum honest members cannot produce
    │   ├── SumOverflow               a sum of releases would leave its integer range
    │   └── ModelNotFinite            a step would give a stored model a non-finite value
    ├── NotFound                      unknown study, participant, contribution  (404)
    ├── Conflict                                                                  (409)
    │   ├── BudgetExceeded            the release would take spending past the cap
    │   ├── ConfigVersionConflict     stale or downgraded config version
    │   └── IdempotencyConflict       same idempotency key, different bytes
    ├── ConfigError                   a signed study config cannot be trusted
    │   ├── SignatureInvalid          bad signature, wrong key, or LSH digest mismatch
    │   ├── ConfigExpired
    │   └── ConfigDowngrade           older version than one already seen
    └── CoordinatorUnavailable        participant side: network or 5xx after retries

Every class takes a human message that says what to do, plus context as keyword arguments,
kept in ``.context`` for logs. ``status_code`` is the HTTP status the coordinator maps it to;
``exit_code`` the exit status of the command line that ends with it (``fedod-participant``):
InvalidInput 3 (data invalid), ConfigError 4, BudgetExceeded 5, CoordinatorUnavailable 6,
NotFound and Conflict 7 (refused), anything else 1 (a bug).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from common.budget import PrivacyBudget


class FedodError(Exception):
    """Base class for every fedod error; keyword arguments are kept in ``context``."""

    status_code: ClassVar[int] = 500
    exit_code: int = 1

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.context = context


class InvalidInput(FedodError):
    """Bad data or parameters from a caller."""

    status_code = 422
    exit_code = 3


class SchemaMismatch(InvalidInput):
    """Data or its shape does not match the study schema."""


class PayloadInvalid(InvalidInput):
    """Encoded counts that cannot be decoded or fail a check (base64, digest, dtype, range)."""


class PayloadTooLarge(PayloadInvalid):
    """Encoded or decompressed counts larger than the configured limit."""

    status_code = 413


class ReleaseOutOfBounds(PayloadInvalid):
    """A released value outside what an honest release can hold (public bound + noise tail)."""


class SecureSumRejected(ReleaseOutOfBounds):
    """A revealed secure sum outside its public structure (cell range, table totals)."""


class SumOverflow(InvalidInput):
    """Summing releases would leave the integer range; nothing is summed (never a wrap)."""


class ModelNotFinite(InvalidInput):
    """A model update would hold a non-finite value; the model keeps its last good value."""


class NotFound(FedodError):
    """The named study, participant or contribution does not exist."""

    status_code = 404
    exit_code = 7


class Conflict(FedodError):
    """The request conflicts with the current state."""

    status_code = 409
    exit_code = 7


class BudgetExceeded(Conflict):
    """A release would take a participant's spending past its cap; nothing was spent."""

    exit_code = 5

    def __init__(
        self,
        message: str | None = None,
        *,
        spent: PrivacyBudget,
        asked: PrivacyBudget,
        cap: PrivacyBudget,
        **context: object,
    ) -> None:
        if message is None:
            message = (
                f"privacy budget exceeded: already spent {spent}, this release asks {asked}, "
                f"cap is {cap}; nothing was spent. Ask the administrator to raise the cap "
                f"or lower the study's epsilon."
            )
        super().__init__(message, spent=spent, asked=asked, cap=cap, **context)
        self.spent = spent
        self.asked = asked
        self.cap = cap


class ConfigVersionConflict(Conflict):
    """The contribution names a config version that is stale or was downgraded."""


class IdempotencyConflict(Conflict):
    """The idempotency key was already used for a different payload."""


class ConfigError(FedodError):
    """A signed study config cannot be trusted; do not release anything under it."""

    status_code = 422
    exit_code = 4


class SignatureInvalid(ConfigError):
    """Signature does not verify under the pinned key, or the LSH digest does not match."""


class ConfigExpired(ConfigError):
    """The config is past its expiry; fetch a fresh one from the coordinator."""


class ConfigDowngrade(ConfigError):
    """The config is older than one already seen; refuse it (possible replay)."""


class CoordinatorUnavailable(FedodError):
    """Participant side: the coordinator stayed unreachable or failing after retries."""

    status_code = 503
    exit_code = 6
