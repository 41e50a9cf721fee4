"""``typing.get_type_hints`` works on every public class and function (issue 33): no
annotation names something that exists only for the type checker."""

import inspect
import typing

import pytest

import lattice
import lattice.schema
import lattice.testing

PACKAGES = (lattice, lattice.schema, lattice.testing)


def public_objects():
    for package in PACKAGES:
        for name in package.__all__:
            value = getattr(package, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                yield f"{package.__name__}.{name}", value


def callables_of(value):
    """The object and, for a class, its public methods and ``__init__``."""
    yield value
    if inspect.isclass(value):
        for name, member in vars(value).items():
            if inspect.isfunction(member) and (not name.startswith("_") or name == "__init__"):
                yield member


@pytest.mark.parametrize("name,value", list(public_objects()), ids=lambda v: str(v))
def test_get_type_hints_resolves(name, value):
    for item in callables_of(value):
        typing.get_type_hints(item)  # raises NameError for a name it cannot resolve
