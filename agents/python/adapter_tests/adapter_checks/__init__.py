"""Checks that every framework adapter's suite runs the same way (shared test code)."""
