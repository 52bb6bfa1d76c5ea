"""json.loads whose every refusal is a json.JSONDecodeError.

The standard decoder raises other exceptions for two kinds of valid-looking input: a
RecursionError for arrays or objects nested tens of thousands deep, and a plain ValueError
for an integer longer than Python's integer string limit (4,300 digits). Callers that turn
JSONDecodeError into one line of error (or into "ignore this cache file") then let those
through as tracebacks; here both become JSONDecodeError, with the position where known.
"""

from __future__ import annotations

import json
import re

_LONG_INTEGER = re.compile(r"-?\d{4301,}")


def loads(text: str | bytes, **hooks):
    """``json.loads(text, **hooks)`` (``parse_float`` and the like)."""
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise _decode_error("nested too deeply", text, 0) from None
    except ValueError as error:
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8", "replace")
        found = _LONG_INTEGER.search(text)
        if found is None:
            raise _decode_error(str(error).split(";")[0], text, 0) from None
        raise _decode_error(f"a number of {len(found.group().lstrip('-')):,} digits (at most 4,300 are read)",
                            text, found.start()) from None


def _decode_error(message: str, text, position: int) -> json.JSONDecodeError:
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", "replace")
    return json.JSONDecodeError(message, text, position)
