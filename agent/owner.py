"""Who owns a booking: the caller identity a voice session books and cancels under.

Contract
--------
An owner is an opaque string the appointment book stores beside each visit and compares
exactly; it always comes from the session's transport, never from anything the caller says:

- ``phone_owner(from_number, call_sid)``: ``"phone:<From>"`` for a caller number Twilio gave
  (``+`` and 3 to 15 digits), so bookings made from one number can be cancelled in any later
  call from that number; a withheld or non-numeric ``From`` (Twilio's ``+266696687``
  "ANONYMOUS" and its kin, ``anonymous``, SIP URIs, empty) gives ``"call:<CallSid>"``: such
  bookings belong to that call alone (withheld callers must not share one owner).
- ``session_owner(session_id)``: ``"session:<id>"``, a browser /ws session's bookings.

``OWNER_RULES`` are the deployer's choices (``ServeConfig.booking_owner_rule``): ``"caller"``
(default: cancel touches only the caller's own bookings; a session with no owner cancels
nothing) and ``"any"`` (any caller may cancel any booking by name and day, e.g. a front-desk
line). Knows nothing about SQLite, pipecat or Twilio's wire format.
"""

from __future__ import annotations

import re

OWNER_RULES = ("caller", "any")

# Twilio's stand-ins for a number the caller withheld, spelled on a phone keypad:
# ANONYMOUS, RESTRICTED, BLOCKED, UNKNOWN, UNAVAILABLE
WITHHELD_NUMBERS = frozenset(
    {"+266696687", "+7378742833", "+2562533", "+8656696", "+86282452253"}
)
_NUMBER = re.compile(r"\+?[0-9]{3,15}")


def phone_owner(from_number: str | None, call_sid: str) -> str:
    number = (from_number or "").strip()
    if _NUMBER.fullmatch(number) and number not in WITHHELD_NUMBERS:
        return f"phone:{number}"
    if not call_sid:
        raise ValueError("call_sid must be non-empty")
    return f"call:{call_sid}"


def session_owner(session_id: str) -> str:
    if not session_id:
        raise ValueError("session_id must be non-empty")
    return f"session:{session_id}"
