"""Record the public call surface of an installed ``dex`` package as JSON facts.

Run it with a Python that has the reference SDK installed, in a virtual environment of its
own (never the project's)::

    python3 -m venv /tmp/dex-ref && /tmp/dex-ref/bin/pip install dex-python-sdk==1.23.0
    /tmp/dex-ref/bin/python scripts/record_api_facts.py > sdk/tests/data/dex_1_23_api.json

The output holds names, kinds, parameter names, parameter kinds, defaults (as ``repr``),
enum members, generic parameter counts and each public submodule's own names. It holds
no code and no documentation. ``sdk/tests/test_api_signatures.py`` checks our ``dex``
against it. The script imports nothing from this project, so it runs in any environment.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import pkgutil
import sys
import typing
from types import ModuleType
from typing import Any

PACKAGE = "dex"


def _params(obj: Any) -> list[dict[str, Any]] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out: list[dict[str, Any]] = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        entry: dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = repr(p.default)
        out.append(entry)
    return out


def _members(cls: type) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, raw in vars(cls).items():
        if name.startswith("_") and name not in (
            "__enter__",
            "__exit__",
            "__aenter__",
            "__aexit__",
        ):
            continue
        if isinstance(raw, property):
            members[name] = {"kind": "property"}
            continue
        if isinstance(raw, (staticmethod, classmethod)):
            kind = type(raw).__name__
            func = raw.__func__
        elif inspect.isfunction(raw):
            kind = "method"
            func = raw
        else:
            continue
        params = _params(func)
        entry: dict[str, Any] = {"kind": kind, "async": inspect.iscoroutinefunction(func)}
        if params is not None:
            if kind == "method" and params and params[0]["name"] in ("self",):
                params = params[1:]
            entry["params"] = params
        members[name] = entry
    return members


def _describe(obj: Any) -> dict[str, Any]:
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return {"kind": "enum", "members": {m.name: repr(m.value) for m in obj}}
    if isinstance(obj, type):
        kind = "exception" if issubclass(obj, BaseException) else "class"
        entry: dict[str, Any] = {
            "kind": kind,
            "bases": [b.__name__ for b in obj.__mro__[1:] if b is not object],
            "generic_params": len(getattr(obj, "__parameters__", ()) or ()),
        }
        init = _params(obj)
        if init is not None:
            entry["init"] = init
        entry["members"] = _members(obj)
        return entry
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return {"kind": "function", "params": _params(obj)}
    return {"kind": "value", "type": type(obj).__name__}


def _own_names(mod: ModuleType, exported: set[str]) -> list[str]:
    # A module's own names: defined in it, and (for functions) exported by the package too.
    names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
    own = []
    for name in names:
        obj = getattr(mod, name, None)
        if obj is None or inspect.ismodule(obj) or isinstance(obj, typing.TypeVar):
            continue
        if getattr(obj, "__module__", None) != mod.__name__:
            continue
        if name[:1].islower() and name not in exported:
            continue
        own.append(name)
    return sorted(own)


def record() -> dict[str, Any]:
    """Return the facts of the installed package (see the module docstring)."""
    pkg = importlib.import_module(PACKAGE)
    exported = sorted(getattr(pkg, "__all__", [n for n in vars(pkg) if not n.startswith("_")]))
    facts: dict[str, Any] = {
        "package": PACKAGE,
        "names": {n: _describe(getattr(pkg, n)) for n in exported if hasattr(pkg, n)},
        "submodules": {},
    }
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{PACKAGE}.{info.name}")
        facts["submodules"][info.name] = _own_names(mod, set(exported))
    return facts


def main() -> None:
    """Print the facts of the installed package as JSON."""
    json.dump(record(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
