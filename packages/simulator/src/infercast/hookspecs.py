"""Hooks the simulator adds to the adapter contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from infercast_adapters.hookspecs import hookspec

if TYPE_CHECKING:
    from infercast.devices import DeviceSpec


@hookspec
def infercast_register_devices(register: Callable[[DeviceSpec], None]) -> None:
    """Register device profiles the simulator can price on.

    Called once, when the simulator first lists or looks up devices.

    :param register: call ``register(DeviceSpec(...))`` once per device; a name that is
        already taken is an error naming it.
    :return: nothing; devices go through ``register``.
    """
