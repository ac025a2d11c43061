"""Dex for Python SDK."""
