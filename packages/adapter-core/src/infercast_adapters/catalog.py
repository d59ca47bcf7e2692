"""What plugins offer by name: models they resolve offline, and the speculative options of a
family. Both are data, registered through callbacks that import no model code, so listing
them is cheap; each entry names the model_type it belongs to, which must be one the
registering plugin owns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from infercast_adapters.errors import ProfileError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelRef:
    """A model reference a plugin resolves offline (through ``infercast_resolve_config``)."""

    ref: str
    """What a user types: ``moonshotai/Kimi-K2.5``."""
    model_type: str
    """The family it belongs to (a model_type the plugin registered a profile for)."""
    aliases: tuple[str, ...] = ()
    default: int = 0
    """Above 0: offered as the default model of the command line; the highest offer wins."""
    description: str = ""

    def validate(self) -> None:
        if not isinstance(self.ref, str) or not self.ref.strip():
            raise ProfileError("ref", f"{self.ref!r} is not a model reference")
        if not isinstance(self.model_type, str) or not _IDENTIFIER.match(self.model_type):
            raise ProfileError("model_type", f"{self.model_type!r} is not a model_type")
        if not all(isinstance(a, str) and a.strip() for a in self.aliases):
            raise ProfileError("aliases", f"{self.aliases!r} are not all non-empty strings")
        if not isinstance(self.default, int) or isinstance(self.default, bool):
            raise ProfileError("default", f"{self.default!r} is not an integer")


@dataclass(frozen=True)
class SpecOption:
    """One speculative-decoding option of a model family, with what is published about it.

    ``algorithm`` is ``EAGLE3`` (a separate draft checkpoint, ``draft``) or ``MTP`` (the
    family's own next-token layers). ``steps``/``topk``/``draft_tokens`` are the engine's
    default setting; ``accept_length`` was measured at ``measured_steps`` draft steps
    (``datasets`` per dataset when published), ``depth_shape`` gives conditional acceptance by
    depth where it is published.
    """

    model_type: str
    algorithm: str
    name: str
    """The acceptance preset's name (``kimi-k2.5-eagle3-mla``)."""
    source: str
    draft: str | None = None
    steps: int = 3
    topk: int = 1
    draft_tokens: int = 4
    accept_length: float | None = None
    measured_steps: int = 3
    datasets: Mapping[str, float] = field(default_factory=dict)
    depth_shape: tuple[float, ...] | None = None
    depth_source: str = ""
    default: bool = True
    """Swept by ``infercast plan`` unless speculation is turned off."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", MappingProxyType(dict(self.datasets)))

    __hash__ = None  # type: ignore[assignment]

    def validate(self) -> None:
        if self.algorithm not in ("EAGLE3", "MTP"):
            raise ProfileError("algorithm", f"{self.algorithm!r}; valid: EAGLE3, MTP")
        if self.algorithm == "EAGLE3" and not self.draft:
            raise ProfileError("draft", "an EAGLE3 option names its draft checkpoint")
        if not isinstance(self.model_type, str) or not _IDENTIFIER.match(self.model_type):
            raise ProfileError("model_type", f"{self.model_type!r} is not a model_type")
        for name in ("steps", "topk", "draft_tokens", "measured_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ProfileError(name, f"{value!r} is not a positive integer")
        lengths = [self.accept_length] if self.accept_length is not None else []
        for value in [*lengths, *self.datasets.values()]:
            if not isinstance(value, (int, float)) or not 1.0 <= value <= self.measured_steps + 1:
                raise ProfileError("accept_length", f"{value!r} is outside [1, {self.measured_steps + 1}]")
        for value in self.depth_shape or ():
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ProfileError("depth_shape", f"{value!r} is not a rate in [0, 1]")
