"""Credentials of Clients and Workers: ``Credential``, ``FileCredential``, ``ApiKeyCredential``."""

from __future__ import annotations

from dex._credential import ApiKeyCredential, ApiKeyExchangeError, Credential, FileCredential

__all__ = ["ApiKeyCredential", "ApiKeyExchangeError", "Credential", "FileCredential"]
