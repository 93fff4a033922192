"""Sign-in sessions with no state in the console: a session is its cookie, encrypted and
authenticated with the console's session key (Fernet: AES-128-CBC and HMAC-SHA256, from the
`cryptography` package). Any console replica holding the same key reads it, and a restart
signs nobody out. The browser holds the credential only encrypted, in an HttpOnly,
SameSite=Strict cookie (Secure under TLS): script cannot read it, and without the key
nobody can decrypt or forge it.

Each session has its CSRF token (every POST form carries it). Idle expiry: every page
re-issues the cookie stamped with the time of the request, and a cookie older than `idle_s`
is refused. Signing out clears the cookie; with no server state, a copy taken before
stays valid until its idle expiry (keep `--idle-minutes` short).
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

COOKIE = "memoryd_console"
# Browsers keep cookies up to 4,096 bytes (name and attributes included).
MAX_COOKIE_BYTES = 3_900


class BadSessionKey(ValueError):
    """The session key file does not hold a Fernet key."""


def load_key(path: Path) -> bytes:
    """The session key from a file: a Fernet key (urlsafe base64 of 32 bytes), as
    `python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`
    prints it."""
    key = path.read_bytes().strip()
    try:
        Fernet(key)
    except ValueError as err:
        raise BadSessionKey(
            f"{path} does not hold a Fernet key (32 bytes, urlsafe base64)"
        ) from err
    return key


@dataclass
class Session:
    csrf: str
    # Empty until signed in.
    credential: str = ""
    # What the sign-in learnt of the credential (shown; the service still decides).
    label: str = ""
    may_list: bool = False

    @property
    def signed_in(self) -> bool:
        return bool(self.credential)

    def csrf_ok(self, token: str) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf, token)


class CookieTooLarge(ValueError):
    """The credential is too long to travel in a cookie."""


class Sessions:
    def __init__(
        self, key: bytes | None, idle_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        # Without a configured key, one of this process: sessions end with it.
        self._fernet = Fernet(key or Fernet.generate_key())
        self._idle_s = max(1, int(idle_s))
        self._clock = clock

    def new(self) -> Session:
        """A session before sign-in: a CSRF token for the sign-in form."""
        return Session(secrets.token_urlsafe(32))

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie holds if this console wrote it and it is not idle past
        `idle_s`; else None."""
        if not cookie:
            return None
        try:
            data = self._fernet.decrypt_at_time(
                cookie.encode(), ttl=self._idle_s, current_time=int(self._clock())
            )
            fields = json.loads(data)
            return Session(
                csrf=str(fields["csrf"]),
                credential=str(fields.get("credential", "")),
                label=str(fields.get("label", "")),
                may_list=bool(fields.get("may_list", False)),
            )
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None

    def cookie(self, session: Session) -> str:
        """The session as a cookie value, stamped now (its idle clock restarts)."""
        data = json.dumps(asdict(session), separators=(",", ":")).encode()
        return self._fernet.encrypt_at_time(data, int(self._clock())).decode()

    def sign_in(self, credential: str, label: str, may_list: bool) -> Session:
        """A new session with a new CSRF token (nothing of the pre-sign-in one is kept)."""
        session = Session(secrets.token_urlsafe(32), credential, label, may_list)
        if len(self.cookie(session)) > MAX_COOKIE_BYTES:
            raise CookieTooLarge("this credential is too long to keep in a session cookie")
        return session
