"""Numbered SQL migrations (``migrations/NNNN_name.sql``), applied in order, once each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, kw_only=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """Every migration shipped with the package, ordered by version."""
    out: list[Migration] = []
    for entry in resources.files("dex_server.store").joinpath("migrations").iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            out.append(Migration(version=int(m[1]), name=m[2], sql=entry.read_text()))
    out.sort(key=lambda x: x.version)
    for i, mig in enumerate(out, start=1):
        if mig.version != i:
            raise RuntimeError(f"migration numbers must be contiguous; {mig.version} != {i}")
    return out
