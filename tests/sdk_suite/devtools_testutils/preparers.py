"""Resource preparers: decorators that create what a test needs, pass it in, and remove it.

``AbstractPreparer`` is the machinery the SDK's preparers build on: for each run of the wrapped
test it calls ``create_resource(name, **kwargs_so_far)``, adds the returned keyword arguments,
calls the test (with only the arguments it accepts), then ``remove_resource``. The wrapper shows
pytest the test's signature minus what the preparer provides, so pytest's parametrize and
fixtures see only their own arguments. Coroutine tests get a coroutine wrapper.
"""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import Callable
from typing import Any, ClassVar


class FakeResource:
    """What Azure Resource Manager returns; the tests read ``.name`` (and ``.id``)."""

    def __init__(self, name: str, id: str = "") -> None:  # noqa: A002 - ARM's field name
        self.name = name
        self.id = id or name

    def __repr__(self) -> str:
        return f"FakeResource(name={self.name!r})"


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


class AbstractPreparer:
    """Base of every preparer; subclasses set ``provides`` and implement create/remove."""

    provides: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name_prefix: str = "", random_name_length: int = 24, **_: Any) -> None:
        self.name_prefix = name_prefix
        self.random_name_length = random_name_length

    def provided(self) -> tuple[str, ...]:
        return self.provides

    def random_name(self) -> str:
        prefix = "".join(c for c in self.name_prefix.lower() if c.isalnum())[:16]
        return f"{prefix}{uuid.uuid4().hex[:8]}"

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError

    def remove_resource(self, name: str, **kwargs: Any) -> None:
        """Most preparers leave nothing behind that a later test could trip over."""

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        preparer = self

        def prepare(kwargs: dict[str, Any]) -> str:
            name = preparer.random_name()
            kwargs.update(preparer.create_resource(name, **kwargs))
            return name

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                name = prepare(kwargs)
                try:
                    return await fn(*args, **_accepted(fn, kwargs))
                finally:
                    preparer.remove_resource(name, **kwargs)
        else:

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                name = prepare(kwargs)
                try:
                    return fn(*args, **_accepted(fn, kwargs))
                finally:
                    preparer.remove_resource(name, **kwargs)

        signature = inspect.signature(fn)
        given = set(self.provided())
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p for p in signature.parameters.values() if p.name not in given]
        )
        del wrapper.__wrapped__  # type: ignore[attr-defined]
        return wrapper


class ResourceGroupPreparer(AbstractPreparer):
    """Azure's resource groups have no counterpart in sbemu: a name, nothing created."""

    provides = ("resource_group", "location")

    def __init__(
        self,
        name_prefix: str = "",
        parameter_name: str = "resource_group",
        parameter_name_for_location: str = "location",
        location: str = "local",
        **kwargs: Any,
    ) -> None:
        super().__init__(name_prefix, **kwargs)
        self.parameter_name = parameter_name
        self.parameter_name_for_location = parameter_name_for_location
        self.location = location

    def provided(self) -> tuple[str, ...]:
        return (self.parameter_name, self.parameter_name_for_location)

    def create_resource(self, name: str, **kwargs: Any) -> dict[str, Any]:
        return {
            self.parameter_name: FakeResource(name, f"/resourceGroups/{name}"),
            self.parameter_name_for_location: self.location,
        }


CachedResourceGroupPreparer = functools.partial(ResourceGroupPreparer, use_cache=True)
RandomNameResourceGroupPreparer = ResourceGroupPreparer
