"""How optree looks into a container (a leaf module: it imports nothing of looptoolkit).

A container rule is a [`Node`][looptoolkit._common.node.Node], optree's ``(flatten, unflatten)``
pair; the pytree layer and the backends' own containers (TensorDict) both write them, and
carry the object being flattened in the treespec as a [`Ref`][looptoolkit._common.node.Ref].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Node", "Ref"]

Node = tuple[Callable[..., Any], Callable[..., Any]]


class Ref:
    """Carries an object as treespec metadata, compared by identity.

    Dataclass equality would compare arrays field by field; identity is what
    rebuilding needs.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)
