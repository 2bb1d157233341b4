"""Method name → :class:`~slm.methods.base.Method`: the one list of methods the platform has."""

from __future__ import annotations

from slm.config import Registry
from slm.methods.base import Method
from slm.models.config import METHOD_SETTINGS

METHODS: Registry[Method] = Registry("method", key="pretrain.method")


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method known by its ``name``, and its settings (if it has any) the config
    section ``pretrain.model.<name>``."""
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r} is registered twice")
    if "swept_by_default" not in vars(cls):
        raise TypeError(f"method {cls.name!r} ({cls.__qualname__}) must set swept_by_default: whether a sweep "
                        "that names no methods compares it")
    METHODS.register(cls.name, cls())
    if cls.Settings is not None:
        METHOD_SETTINGS.register(cls.name, cls.Settings)
    return cls


def get(name: str, key: str = "pretrain.method") -> Method:
    """The method called ``name``; an unknown one fails with the config key that named it."""
    return METHODS.get(name, key)


def names() -> list[str]:
    return METHODS.names()
