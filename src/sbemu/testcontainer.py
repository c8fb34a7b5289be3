"""The former home of ``SbemuContainer``, kept because docs/containers.md named it: the class
lives in ``sbemu.testing.container`` (import it from there)."""

from sbemu.testing.container import SbemuContainer

__all__ = ["SbemuContainer"]
