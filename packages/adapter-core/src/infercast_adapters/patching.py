"""Reversible patches to classes and modules, gated on the model_type they are for."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

_ABSENT = object()


@dataclass(frozen=True)
class Patch:
    """Replace ``owner.attribute`` with ``replacement`` while a model of ``model_type`` is built.

    ``owner`` is usually a class or a module. The original is read from ``owner.__dict__``
    so that an inherited attribute is restored by removing the override, not by copying the
    parent's value onto the child.
    """

    owner: Any
    attribute: str
    replacement: Any
    model_type: str
    reason: str = ""

    def applies_to(self, model_type: str | None) -> bool:
        return model_type == self.model_type

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or getattr(self.owner, "__name__", repr(self.owner))
        return f"Patch({owner}.{self.attribute} for {self.model_type!r})"


def _own_value(owner: Any, attribute: str) -> Any:
    namespace = getattr(owner, "__dict__", None)
    if namespace is None:  # an object with __slots__ only
        return getattr(owner, attribute, _ABSENT)
    return namespace.get(attribute, _ABSENT)


@contextlib.contextmanager
def patched(patches: Iterable[Patch], model_type: str | None) -> Iterator[list[Patch]]:
    """Apply the patches gated on ``model_type``, restore the exact originals on exit.

    Patches for other model types are skipped. Exit restores in reverse order, also when the
    body raises, so nested and repeated use (the same patch applied inside itself) unwinds
    to what was there before the outermost entry. Yields the patches that were applied.
    """
    applied: list[tuple[Patch, Any]] = []
    try:
        for patch in patches:
            if not patch.applies_to(model_type):
                continue
            original = _own_value(patch.owner, patch.attribute)
            setattr(patch.owner, patch.attribute, patch.replacement)
            applied.append((patch, original))
        yield [p for p, _ in applied]
    finally:
        for patch, original in reversed(applied):
            if original is _ABSENT:
                with contextlib.suppress(AttributeError):
                    delattr(patch.owner, patch.attribute)
            else:
                setattr(patch.owner, patch.attribute, original)
