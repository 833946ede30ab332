"""Why a subscription stopped, or could not start."""

from __future__ import annotations

from iqstate.errors import IqstateError


class InvalidCursorError(IqstateError, ValueError):
    """A cursor that is malformed, or that another store, application or filter issued."""


class SubscriptionEndedError(IqstateError):
    """The subscription was ended by the instance (not by its caller): `reason` says why,
    and `cursor` (the last batch's, or `None` before the first) resumes it, here once the
    cause is gone or on another instance hosting the partitions."""

    def __init__(self, reason: str, cursor: str | None) -> None:
        resume = "" if cursor is None else f"; resume with from_cursor={cursor!r}"
        super().__init__(f"{reason}{resume}")
        self.reason = reason
        self.cursor = cursor


class SubscriptionLaggedError(SubscriptionEndedError):
    """The subscriber fell too far behind the committed batches and was disconnected, so
    that it holds back neither the pipeline nor the other subscribers."""
