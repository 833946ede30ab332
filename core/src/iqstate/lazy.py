"""Objects named by import path and imported the first time they are used.

Every application loads every installed plugin when it is created, so what a plugin
registers must be cheap to import. A plugin names its heavy parts (an engine's store
classes, a command's implementation, a codec) as `"package.module:attribute"`, the
entry-point syntax; the module, with RocksDB, LMDB or an HTTP stack behind it, is imported
only when a store of that engine is built or the command runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from iqstate.errors import PluginError


class LazyObject:
    """A callable standing for the object at `target`, imported on first use.

    `role` says whose object it is (plugin, engine, what for), so a failing import names
    the plugin, the engine and the target. Calling it calls the object; `resolve()`
    returns the object itself. Pickles as its target (for store factories sent to other
    processes).
    """

    __slots__ = ("_object", "role", "target")

    def __init__(self, target: str, role: str) -> None:
        module, _, attribute = target.partition(":") if isinstance(target, str) else ("", "", "")
        if not module or not attribute:
            raise PluginError(f"{role}: expected an import path 'module:attribute', got {target!r}")
        self.target = target
        self.role = role
        self._object: Any = None

    def resolve(self) -> Any:
        """The object at `target`, imported the first time."""
        found = self._object
        if found is None:
            found = self._object = self._import()
        return found

    def _import(self) -> Any:
        module_name, _, path = self.target.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
            for attribute in path.split("."):
                found = getattr(found, attribute)
        except (ImportError, AttributeError) as error:
            raise PluginError(
                f"{self.role}: cannot load {self.target!r}: {type(error).__name__}: {error}"
            ) from error
        return found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        found = self._object
        if found is None:
            found = self.resolve()
        return found(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyObject) and other.target == self.target

    def __hash__(self) -> int:
        return hash(self.target)

    def __repr__(self) -> str:
        return f"LazyObject({self.target!r})"

    def __reduce__(self) -> tuple[type[LazyObject], tuple[str, str]]:
        return LazyObject, (self.target, self.role)


def lazy(value: Any, role: str) -> Any:
    """`value`, or a `LazyObject` for it when it is an import path (`"module:attribute"`);
    a `LazyObject` is relabelled with `role`."""
    if isinstance(value, str):
        return LazyObject(value, role)
    if isinstance(value, LazyObject):
        return LazyObject(value.target, role)
    return value


def resolved(value: Any) -> Any:
    """The object a `LazyObject` stands for (imported now), or `value` itself."""
    return value.resolve() if isinstance(value, LazyObject) else value


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` (PEP 562) exporting names imported on first use.

    `exports` maps a module to the names it provides: `from package import Name` imports
    that module only then, so importing the package (or its plugin entry module) stays cheap.
    """
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__
