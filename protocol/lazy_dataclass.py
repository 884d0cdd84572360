"""Dataclasses made when first used: the operations' import costs a front call what it uses, not all 16.

``dataclasses.dataclass`` writes and compiles six methods for each frozen class (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``): ~0.55 ms of CPU a class, ~9 ms
for protocol/operations.py, paid by every ``memstrata search`` or ``add`` that sends one operation
(bench/bench_front.py).  :func:`lazy_dataclass` records the class and its parameters; the class becomes
exactly the dataclass ``dataclasses.dataclass`` makes, the same class object, the first time it is
instantiated or asked what only a dataclass has (``dataclasses.fields``, ``is_dataclass``,
``inspect.signature``, a ``match`` pattern).  Such a class derives from :class:`LazyDataclass`, whose
``__new__`` and metaclass are what notice.

Until then the class's own attributes are as its body wrote them (a field's default is still the
``dataclasses.Field``): nothing reads them there but ``dataclasses`` itself.  Completion holds a lock,
so threads (the daemon's) never see a class half made.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["LazyDataclass", "LazyDataclassMeta", "defer_dataclass", "lazy_dataclass", "make"]

T = TypeVar("T", bound=type)
L = TypeVar("L", bound="LazyDataclass")

# The class attributes through which dataclasses, inspect and ``match`` learn what a class is: asked of a
# class not made yet, they make it first.
_MAKES = frozenset({"__dataclass_fields__", "__dataclass_params__", "__match_args__", "__signature__"})

_pending: dict[type, dict[str, Any]] = {}  # class -> its dataclass parameters, until it is made
_making: set[type] = set()  # being made by the thread holding the lock (what dataclasses asks of it meanwhile)
_lock = threading.RLock()


def defer_dataclass(*, frozen: bool = False) -> Callable[[T], T]:
    """``@dataclasses.dataclass(frozen=...)``, applied when the class is first used (a :class:`LazyDataclass`)."""

    def record(cls: T) -> T:
        if not issubclass(cls, LazyDataclass):
            raise TypeError(f"{cls.__name__} is not a LazyDataclass: nothing would make it a dataclass")
        _pending[cls] = {"frozen": frozen}
        return cls

    return record


def make(cls: type) -> bool:
    """Make ``cls`` and the lazy classes it derives from the dataclasses they declare, bases first (a
    dataclass reads its bases' fields); False if there was nothing to do."""
    if not _pending:  # every class made (the daemon's, soon after its start): no lock, no walk
        return False
    lazy = [c for c in reversed(cls.__mro__) if c in _pending]
    if not lazy:  # a class leaves _pending only once made
        return False
    with _lock:
        for c in lazy:
            if c in _pending and c not in _making:  # made meanwhile by another thread; being made by this one
                _making.add(c)
                try:
                    dataclasses.dataclass(c, **_pending[c])
                    del _pending[c]
                finally:
                    _making.discard(c)
    return True


if TYPE_CHECKING:  # to mypy, the dataclass the class becomes (typing.dataclass_transform is Python 3.11's)
    from dataclasses import dataclass as lazy_dataclass
else:
    lazy_dataclass = defer_dataclass


class LazyDataclassMeta(type):
    """Makes a class when it is asked a dataclass's attribute (``dataclasses.fields``, ``inspect.signature``…).

    Asked of the class itself, not only when missing: a subclass would inherit its made base's
    ``__dataclass_fields__`` and so look like a dataclass without fields."""

    def __getattribute__(cls, name: str) -> Any:
        if name in _MAKES:
            make(cls)
        return super().__getattribute__(name)


class LazyDataclass(metaclass=LazyDataclassMeta):
    """The base of the classes :func:`lazy_dataclass` makes: made when first instantiated (here, so that
    ``inspect.signature`` of a made class is its ``__init__``'s, as a dataclass's is)."""

    def __new__(cls: type[L], *args: Any, **kwargs: Any) -> L:
        make(cls)
        return super().__new__(cls)  # object.__new__ takes the class alone
