"""Options shared by Attribute and AttributeMap: search index, Attribute Store sync, hard delete."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from dex.errors import FlowDefinitionError


class IndexType(enum.Enum):
    """How an indexed Attribute's value is searchable (``AttributeIndex(IndexType.INT)``)."""

    KEYWORD = "keyword"
    FULL_TEXT = "full_text"
    KEYWORD_ARRAY = "keyword_array"
    INT = "int"
    DOUBLE = "double"
    BOOL = "bool"
    DATETIME = "datetime"


@dataclass(frozen=True, slots=True)
class AttributeIndex:
    """A search index over an Attribute's (or AttributeMap's) latest value.

    Workers register the index with their Flow types; each committed write of the
    Attribute updates the search field in the same commit, so ``search_flows`` sees it.
    Keys are global across Flow types (one key, one type). An AttributeMap's index needs
    an explicit ``index_key``; every instance write overwrites that one field.

    Args:
        type: the index type; an ``IndexType`` or its value (``"keyword"``, ...).
        index_key: the search field name; ``""`` (the default) uses the Attribute's name.

    Raises:
        ValueError: ``type`` is not an ``IndexType`` or one of its values.
        TypeError: ``index_key`` is not a string.

    """

    type: IndexType
    index_key: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.type, IndexType):
            try:
                object.__setattr__(self, "type", IndexType(self.type))
            except ValueError:
                kinds = ", ".join(t.value for t in IndexType)
                raise ValueError(
                    f"AttributeIndex type must be an IndexType ({kinds}), got {self.type!r}"
                ) from None
        if not isinstance(self.index_key, str):
            raise TypeError(f"AttributeIndex index_key must be a str, got {self.index_key!r}")


# Value types a hard-delete Attribute refuses: its value lives as one stored blob.
_NOT_HARD_DELETABLE = (int, float, bool)


def check_durable_options(
    what: str,
    name: str,
    value_type: object,
    index: AttributeIndex | None,
    sync_to_attribute_store: bool,
    hard_delete_on_null: bool,
) -> None:
    """Validate the index / sync / hard-delete options of an Attribute or AttributeMap.

    Raises:
        TypeError: a wrong option type, or a hard-delete Attribute of a number or bool.
        FlowDefinitionError: hard delete combined with an index or Attribute Store sync.

    """
    if index is not None and not isinstance(index, AttributeIndex):
        raise TypeError(f"{what} {name!r}: index must be an AttributeIndex or None, got {index!r}")
    for option, flag in (
        ("sync_to_attribute_store", sync_to_attribute_store),
        ("hard_delete_on_null", hard_delete_on_null),
    ):
        if not isinstance(flag, bool):
            raise TypeError(f"{what} {name!r}: {option} must be a bool, got {flag!r}")
    if not hard_delete_on_null:
        return
    if value_type in _NOT_HARD_DELETABLE:
        kind: Any = getattr(value_type, "__name__", value_type)
        raise TypeError(
            f"hard-delete {what} {name!r} supports only string and object values, not {kind}"
        )
    if index is not None:
        raise FlowDefinitionError(f"hard-delete {what} {name!r} cannot have an index")
    if sync_to_attribute_store:
        raise FlowDefinitionError(f"hard-delete {what} {name!r} cannot use sync_to_attribute_store")


def unavailable_feature(decl: Any) -> str | None:
    """Name the not-yet-available feature a declaration asks for, or None."""
    if getattr(decl, "sync_to_attribute_store", False):
        return "Attribute Store sync (sync_to_attribute_store)"
    if getattr(decl, "hard_delete_on_null", False):
        return "hard-delete Attributes (hard_delete_on_null)"
    return None
