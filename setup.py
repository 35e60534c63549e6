"""Install razorlib.

torch is deliberately not an install requirement: an unpinned ``torch`` makes pip fetch
the newest CUDA build (several GB) on machines without torch.  Install the tested stack
with ``pip install -r requirements/runtime.txt`` (which pins the CPU-friendly
``torch==2.13.0``) before installing razorlib.
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def read_version() -> str:
    text = (HERE / 'razorlib' / 'version.py').read_text()
    return re.search(r"__version__ = '([^']+)'", text).group(1)


def runtime_requirements() -> list:
    """Runtime requirements minus torch (see the module docstring)."""
    reqs = []
    for line in (HERE / 'requirements' / 'runtime.txt').read_text().splitlines():
        line = line.split('#')[0].strip()
        if line and not line.startswith('torch'):
            reqs.append(line)
    return reqs


setup(
    version=read_version(),
    packages=find_packages(include=['razorlib', 'razorlib.*']),
    install_requires=runtime_requirements(),
    extras_require={
        'dev': ['torch-pruning'],
        # tools/deploy.py and benchmarks/gpu_latency.py build TensorRT engines where this is
        # installed (a machine with an NVIDIA GPU); never needed otherwise
        'tensorrt': ['tensorrt>=10'],
    },
)
