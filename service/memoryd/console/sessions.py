"""Sign-in sessions, kept in the console's memory: the browser holds a random session id
in an HttpOnly, SameSite=Strict cookie (Secure under TLS), never the credential. Each
session has its CSRF token (every POST form carries it) and expires after `idle_s`
without a request. A restart of the console signs everyone out."""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

COOKIE = "memoryd_console"


@dataclass
class Session:
    id: str
    csrf: str
    last_seen: float
    # Empty until signed in.
    credential: str = ""
    # What the sign-in learnt of the credential (shown; the service still decides).
    label: str = ""
    may_list: bool = False
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def signed_in(self) -> bool:
        return bool(self.credential)

    def csrf_ok(self, token: str) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf, token)


class Sessions:
    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle_s = idle_s
        self._clock = clock
        self._by_id: dict[str, Session] = {}

    def new(self) -> Session:
        self._sweep()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), self._clock())
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id (its idle clock restarted), or None."""
        session = self._by_id.get(session_id or "")
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self._idle_s:
            del self._by_id[session.id]
            return None
        session.last_seen = now
        return session

    def sign_in(self, old: Session, credential: str, label: str, may_list: bool) -> Session:
        """A new session id and CSRF token at sign-in (no fixation of a pre-sign-in id)."""
        self.end(old)
        session = self.new()
        session.credential, session.label, session.may_list = credential, label, may_list
        return session

    def end(self, session: Session) -> None:
        self._by_id.pop(session.id, None)

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._by_id.items() if now - s.last_seen > self._idle_s]:
            del self._by_id[key]
