"""Pick torch's thread count for a tool: one thread for a small model or a busy machine.

torch starts one intra-op thread per physical core.  For a small model, each operation
is too short to split: the threads spend their time waiting for each other, and when
other processes hold the cores they wait for a core as well.  On a busy 2-core machine
the digits search took 7 minutes with torch's default and 43 s on one thread, with the
same results.  The tools therefore call :func:`set_threads` once their model is built,
and log the choice with its reason.  The rule, the first line that applies:

1. ``--threads N``: N threads.
2. ``OMP_NUM_THREADS`` is set (by the user, or by ``torchrun`` for each process): torch
   follows it already; it is kept.
3. The model has fewer than :data:`SMALL_MODEL_PARAMS` parameters: 1 thread.
4. Otherwise the cores the 1-minute load average leaves idle (rounded), at least 1 and at
   most torch's default.

Example:
    >>> choice = choose_threads(None, torch.nn.Linear(64, 10), environ={}, default=8)
    >>> choice.threads, str(choice)
    (1, '1 thread: the model has 650 parameters, fewer than 1M (--threads N to change)')
    >>> big = torch.nn.Linear(2048, 1024)
    >>> str(choose_threads(None, big, environ={}, default=8, cpus=16, load=10.2))
    '6 threads: 6 of 16 cores idle by the load average 10.2 (--threads N to change)'
    >>> choose_threads(3, big, environ={'OMP_NUM_THREADS': '1'}).threads
    3
"""
import os
from typing import Mapping, NamedTuple, Optional

import torch
import torch.nn as nn

from .config import ConfigError

#: Below this many parameters a model runs on one thread (the digits supernet has 132k,
#: ResNet-18 11.7M).
SMALL_MODEL_PARAMS = 1_000_000


class ThreadChoice(NamedTuple):
    """How many intra-op threads torch gets, and why (printed in the tool's log)."""
    threads: int
    reason: str

    def __str__(self) -> str:
        noun = 'thread' if self.threads == 1 else 'threads'
        return f'{self.threads} {noun}: {self.reason} (--threads N to change)'


def choose_threads(requested: Optional[int], model: Optional[nn.Module] = None, *,
                   environ: Optional[Mapping[str, str]] = None, default: Optional[int] = None,
                   cpus: Optional[int] = None, load: Optional[float] = None) -> ThreadChoice:
    """The thread count by the module's rule; the keyword arguments replace what is read
    from this machine (for tests).

    Args:
        requested: ``--threads``, or None to choose.
        model: the model the tool runs; None skips the small-model rule.
        environ: the environment (``os.environ``).
        default: torch's thread count now (``torch.get_num_threads()``).
        cpus: the cores this process may use.
        load: the 1-minute load average; None where the system has none.

    Raises:
        ConfigError: ``requested`` is below 1.
    """
    if requested is not None:
        if requested < 1:
            raise ConfigError(f'--threads: at least 1, got {requested}')
        return ThreadChoice(requested, 'as --threads asks')
    environ = os.environ if environ is None else environ
    default = torch.get_num_threads() if default is None else default
    if environ.get('OMP_NUM_THREADS'):
        return ThreadChoice(default, f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']}")
    if model is not None:
        params = sum(p.numel() for p in model.parameters())
        if params < SMALL_MODEL_PARAMS:
            return ThreadChoice(1, f'the model has {params} parameters, fewer than '
                                f'{SMALL_MODEL_PARAMS // 1_000_000}M')
    cpus = cpus or _usable_cpus()
    if load is None and hasattr(os, 'getloadavg'):
        load = os.getloadavg()[0]
    if load is None:
        return ThreadChoice(default, "torch's default, no load average on this system")
    idle = max(1, min(default, round(cpus - load)))
    return ThreadChoice(idle, f'{idle} of {cpus} cores idle by the load average {load:.1f}')


def set_threads(requested: Optional[int], model: Optional[nn.Module] = None) -> ThreadChoice:
    """Set torch's intra-op threads by :func:`choose_threads`; returns the choice to log."""
    choice = choose_threads(requested, model)
    torch.set_num_threads(choice.threads)
    return choice


def _usable_cpus() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    if hasattr(os, 'sched_getaffinity'):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
