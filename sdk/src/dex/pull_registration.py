"""Registration state of pull Workers and its error."""

from __future__ import annotations

from dex._worker import PullQueueRegistrationState, PullRegistrationState
from dex.errors import PullRegistrationError

__all__ = ["PullQueueRegistrationState", "PullRegistrationError", "PullRegistrationState"]
