"""``dexcli``: run a Dex server and look at Flows from the command line."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """Run the ``dexcli`` command line."""
