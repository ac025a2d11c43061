"""Parsing of human durations (``500ms``, ``30s``, ``5m``, ``12h``, ``1d``) and addresses."""

from __future__ import annotations

import ipaddress
import re

from dex_server.cli._output import usage_error

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(text: str, *, option: str) -> float:
    """Seconds in ``text``: a number with an optional unit (seconds when none).

    Raises:
        CliError: usage error naming ``option`` when the text is not a duration.

    """
    match = _DURATION.match(text)
    if not match:
        raise usage_error(f"{option}: {text!r} is not a duration (examples: 30s, 12h, 1d)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def human_duration(seconds: float) -> str:
    """Format seconds with the largest unit that divides them (``86400.0`` -> ``1d``)."""
    for unit in ("w", "d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
