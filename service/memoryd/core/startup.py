"""Why a server does not start: the one error every start-up check raises, and the one
place a failed start-up becomes what the operator reads."""

from __future__ import annotations

from memoryd.settings import InvalidSettings


class StartupRefused(Exception):
    """The server must not start, for the reason given (shown to the operator as is)."""


def startup_refusal(exc: BaseException) -> StartupRefused | None:
    """One line naming the setting at fault (the command exits 2). None: not the
    operator's doing but a defect, which keeps its traceback."""
    if isinstance(exc, StartupRefused):
        return exc
    if isinstance(exc, InvalidSettings):
        return StartupRefused(str(exc))
    return None
