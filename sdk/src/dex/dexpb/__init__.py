"""Reserved name, kept so that ``import dex.dexpb`` keeps working.

Dex for Python speaks JSON over HTTP and WebSocket (see ``docs/internals.md``), so it has
no generated protocol-buffer messages; this package is empty on purpose.
"""

__all__: list[str] = []
