"""The store conformance kit: subclass `StoreConformance` in your engine's tests.

Needs pytest and hypothesis (`pip install iqstate[testing]`).
"""

from iqstate.testing.conformance import StoreConformance
from iqstate.testing.factory import StoreFactory, make_context, store_directory
from iqstate.testing.state_machine import StoreStateMachine

__all__ = [
    "StoreConformance",
    "StoreFactory",
    "StoreStateMachine",
    "make_context",
    "store_directory",
]
