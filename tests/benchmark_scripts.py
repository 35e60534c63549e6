"""The benchmark scripts as modules, for their tests (benchmarks/ is no package)."""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / 'benchmarks'


def load_ptq_passes(monkeypatch):
    """benchmarks/ptq_passes.py as a module; the benchmarks/ folder it puts on sys.path and
    the sibling scripts it imports from there are gone again after the test."""
    monkeypatch.setattr(sys, 'path', list(sys.path))
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location('ptq_passes_benchmark',
                                                  BENCHMARKS / 'ptq_passes.py')
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        for name in ('ptq_vs_ort', 'pooling'):
            if name not in before:
                sys.modules.pop(name, None)
    return module
