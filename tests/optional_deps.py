"""Skips for tests that need an optional package that may not import here."""
import pytest


def mmpretrain_or_skip() -> None:
    """Skip unless mmpretrain imports.  Where torchvision's compiled ops do not load
    against the installed torch (CPU torch 2.13), importing mmpretrain raises a
    RuntimeError ('operator torchvision::nms does not exist'), not an ImportError, so
    ``pytest.importorskip`` alone would fail instead of skipping."""
    try:
        import mmpretrain  # noqa: F401
    except Exception as err:  # ImportError, or torchvision's RuntimeError
        pytest.skip(f'mmpretrain does not import here ({type(err).__name__}: {err}); '
                    'docs/mm_projects.md says how to install it, with a torchvision that '
                    'loads against this torch')


def torchvision_or_skip():
    """torchvision, or a skip where it does not import (its compiled ops do not load
    against the CPU torch here: a RuntimeError, not an ImportError)."""
    try:
        import torchvision
    except Exception as err:  # ImportError, or the RuntimeError of its compiled ops
        pytest.skip(f'torchvision does not import here ({type(err).__name__}: {err})')
    return torchvision
