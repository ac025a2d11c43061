"""Dex server."""
