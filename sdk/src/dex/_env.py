"""Defaults that come from the environment: the server address and the bearer token.

``dexcli dev`` prints ``export DEX_SERVER_ADDRESS=...``; a Client or Worker built without an
explicit ``server_address`` connects there. ``DEX_TOKEN`` (the variable ``dexcli`` reads too)
is the token of a Client or Worker built without a ``credential``. Explicit arguments win.
The variables are read when the options object is built.
"""

from __future__ import annotations

import os

from dex._credential import CredentialLike

__all__ = [
    "DEFAULT_SERVER_ADDRESS",
    "SERVER_ADDRESS_ENV",
    "TOKEN_ENV",
    "DefaultServerAddress",
    "env_credential",
    "env_server_address",
    "unix_socket_path",
]

SERVER_ADDRESS_ENV = "DEX_SERVER_ADDRESS"
TOKEN_ENV = "DEX_TOKEN"


class DefaultServerAddress(str):
    """The default ``server_address``: tells "not set" apart from an explicit value."""

    __slots__ = ()


DEFAULT_SERVER_ADDRESS = DefaultServerAddress("localhost:8801")
UNIX_PREFIX = "unix:"


def env_server_address(given: str) -> str:
    """``given``, or env ``DEX_SERVER_ADDRESS`` when ``given`` is the unset default.

    Raises:
        ValueError: the address is ``unix:`` without a socket path.
    """
    address = given
    if isinstance(given, DefaultServerAddress):
        configured = os.environ.get(SERVER_ADDRESS_ENV, "").strip()
        if configured:
            address = configured
    unix_socket_path(address)
    return address


def unix_socket_path(address: str) -> str | None:
    """The socket path of a ``unix:PATH`` or ``unix://PATH`` address; None for any other.

    ``unix:///run/dex/dex.sock`` and ``unix:/run/dex/dex.sock`` name the same socket;
    ``unix:dex.sock`` is relative to the working directory.

    Raises:
        ValueError: the address names no path.
    """
    address = address.strip()
    if not address.startswith(UNIX_PREFIX):
        return None
    path = address[len(UNIX_PREFIX) :]
    if path.startswith("//"):
        path = path[2:]
    if not path:
        msg = (
            f"server address {address!r} names no socket: write unix:///PATH, e.g."
            " unix:///run/dex/dex.sock"
        )
        raise ValueError(msg)
    return path


def env_credential(given: CredentialLike) -> CredentialLike:
    """``given``, or the token in env ``DEX_TOKEN`` when ``given`` is None."""
    if given is None:
        configured = os.environ.get(TOKEN_ENV, "").strip()
        if configured:
            return configured
    return given
