"""``python -m dex_server.cli``: the same as the ``dexcli`` command."""

from __future__ import annotations

from dex_server.cli import main

if __name__ == "__main__":
    main()
