"""Secrets kept out of every file tokensweep writes: the one redaction of credentials.

A command line (`tokensweep server start --database postgresql+asyncpg://USER:PASSWORD@HOST/DB`),
a spec's store URL or a setting may carry a password in a URL's user information. Whatever is
logged or recorded (STORE.log's header, the server's record in TOKENSWEEP_HOME, messages) goes
through `redact` first; the real value travels only in a process's environment (the Prefect
server gets its database URL so, never in a file).
"""

from __future__ import annotations

import re

__all__ = ["redact", "MASK"]

MASK = "***"
# scheme://user:password@ -> scheme://user:***@ (any scheme; the password runs to the last "@" of
# the word, so one holding "@", ":" or "/" is masked whole: better too much hidden than a leak)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<password>\S*)@")


def redact(text: str) -> str:
    """`text` with the password of every URL in it masked (``user:***@``); the rest unchanged."""
    return _USERINFO.sub(lambda m: f"{m['head']}{MASK}@" if m["password"] else m[0], text)
