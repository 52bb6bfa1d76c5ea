"""Text from a dataset as a terminal shows it, without acting on it; used by the command line and by
the progress bars below it."""

from __future__ import annotations

import re

#: what must not reach a terminal from a dataset: C0 controls but tab and line feed (ESC opens
#: sequences that clear the screen, hide words or colour what follows; CR and BS overwrite), DEL,
#: C1 controls, the bidirectional overrides and isolates that make a line read in another order, and
#: lone surrogates (a byte of a file name that is not UTF-8), which a UTF-8 terminal cannot take
_NOT_SHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def visible(text: str) -> str:
    """User text (a caption, an id, a file name) as a terminal shows it without acting on it: each
    character of :data:`_NOT_SHOWN` written as its escape (ESC as \\x1b, U+202E as \\u202e); a
    Windows line end is a line end."""
    text = str(text)
    if not _NOT_SHOWN.search(text):
        return text
    return _NOT_SHOWN.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"),
                          text.replace("\r\n", "\n"))


def counted(number: int | float, singular: str, plural: str | None = None) -> str:
    """A count and its noun in one voice across commands: thousands separators, and the noun's
    singular for exactly one ("1 pair", "1,999 pairs"). ``plural`` for a noun that does not
    take an "s" ("1 match", "2 matches")."""
    noun = singular if number == 1 else (plural or f"{singular}s")
    return f"{number:,} {noun}"


#: hex digits of a content hash shown in a shortened id
SHORT_HASH_DIGITS = 10


def short_id(identifier) -> str:
    """An id as places with little room show it: a content-hash id ``sha256:<64 hex>#3`` as
    ``sha256:<first 10 hex>…#3``; any other id as it is. JSON and exports keep full ids."""
    text = str(identifier)
    if not text.startswith("sha256:"):
        return text
    digest, hash_mark, rest = text[len("sha256:"):].partition("#")
    if len(digest) <= SHORT_HASH_DIGITS + 1:
        return text
    return f"sha256:{digest[:SHORT_HASH_DIGITS]}…{hash_mark}{rest}"
