"""Run the examples in razorlib's docstrings: shared by each package's docs tests."""
import doctest
import importlib
import pkgutil
from types import ModuleType
from typing import List


def modules_of(package: ModuleType, recursive: bool = False) -> List[str]:
    """``package``'s name and its modules' (its whole tree if ``recursive``), sorted."""
    walk = pkgutil.walk_packages if recursive else pkgutil.iter_modules
    return [package.__name__] + sorted(
        info.name for info in walk(package.__path__, package.__name__ + '.'))


def assert_examples_pass(name: str) -> None:
    """Every docstring example of module ``name`` prints what it claims."""
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f'{result.failed} of {result.attempted} examples failed in {name}'
