"""Decode untrusted JSON text into Python values, with every failure as one exception type.

`loads_untrusted(data) -> Any` accepts str or bytes (bytes must be UTF-8) and raises
`JSONInputError` (a ValueError) for everything a client can get wrong: not JSON, not UTF-8,
integers longer than Python's int-string limit (4300 digits, a ValueError inside `json`),
nesting deep enough to hit the recursion limit (RecursionError), and `\\uD800`-style escapes of
lone UTF-16 surrogates, which decode fine but make every later `.encode("utf-8")` (a socket
write, a log line, the tokenizer) fail. Callers map `JSONInputError` to their documented error:
1007 `bad_json` on /ws, 400 `invalid_json` on /v1, a logged skip on the Twilio stream.

Knows nothing about sockets or HTTP.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class JSONInputError(ValueError):
    """The text is not JSON this server can use; the message says why (without echoing it)."""


def loads_untrusted(data: str | bytes | bytearray) -> Any:
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONInputError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as e:
        raise JSONInputError(f"not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise JSONInputError("JSON nested too deeply") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string ..."
        raise JSONInputError(f"unusable JSON value ({str(e)[:80]})") from None
    if _SURROGATE_ESCAPE.search(data):  # a valid pair is fine; a lone half is not
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JSONInputError("JSON string holds a lone UTF-16 surrogate") from None
        except (RecursionError, ValueError):
            raise JSONInputError("JSON nested too deeply") from None
    return obj
