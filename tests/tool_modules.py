"""The repository's ``tools/*.py`` scripts imported as modules, for tests in any folder."""
import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).parents[1]


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` imported as a module, so tests call its ``main(argv)``."""
    spec = importlib.util.spec_from_file_location(f'{name}_tool', REPO / 'tools' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
