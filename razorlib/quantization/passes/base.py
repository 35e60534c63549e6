"""PTQPass: a post-training quantization pass that reads calibration data, and its runner.

The IR's graph passes (:class:`~razorlib.ir.GraphPass`) rewrite a graph from the graph
alone; the passes here also run it on calibration batches (bias correction measures an
error's mean, AdaRound fits roundings to layer outputs, mixed precision measures SNRs),
so they take the batches when called and are registered in their own registry,
:data:`razorlib.registry.PTQ_PASSES`.  Each pass says at which stage it runs:

- ``'float'``: on the prepared FP32 graph, before it is dispatched and quantized
  (layerwise equalization rescales weights so that the quantizer sees better ranges);
- ``'calibrated'``: on the quantized graph after calibration (bias correction,
  AdaRound, mixed precision), in the order given.
"""
import abc
import logging
from typing import Any, ClassVar, List, Optional, Sequence, Tuple, Union

import torch

from ...ir import BaseGraph, PassResult
from ...ir.components import build_component
from ...registry import PTQ_PASSES
from ..state import check_calibrated, quantable_operations, uncalibrated_configs

logger = logging.getLogger(__name__)

__all__ = ['PTQPass', 'STAGES', 'build_ptq_pass', 'build_ptq_passes', 'name_list',
           'run_ptq_passes']

STAGES = ('float', 'calibrated')
"""When a pass runs: on the FP32 graph before quantizing, or after calibration."""


class PTQPass(abc.ABC):
    """One post-training quantization pass: changes a graph in place, using data.

    Subclasses set :attr:`stage`, implement :meth:`call`, and register with
    ``@PTQ_PASSES.register_module(name=['ClassName', 'alias'])``; their constructor takes
    the pass's options, which a config gives as ``dict(type='AdaRound', steps=500)``.
    ``pass_(graph, batches)`` checks the stage against the graph (a ``'float'`` pass
    refuses a quantized graph, a ``'calibrated'`` one a graph without calibrated
    operations), runs :meth:`call` and checks the graph's invariants after it.  An error
    keeps its type and gets a note naming the pass.

    Args:
        none here: a subclass's constructor takes its options.

    Example:
        >>> from razorlib.ir import BaseGraph, PassResult
        >>> class CountBatches(PTQPass):
        ...     stage = 'float'
        ...     def call(self, graph, batches, device):
        ...         return PassResult.counted(graph, len(batches))
        >>> CountBatches()(BaseGraph(), [torch.zeros(1)] * 3).changes
        3
    """

    stage: ClassVar[str] = 'calibrated'

    def __call__(self, graph: BaseGraph, batches: Sequence[Any],
                 device: Union[str, torch.device] = 'cpu') -> PassResult:
        """Run the pass on ``graph`` with ``batches`` (graph inputs, one run each).

        A ``'calibrated'`` pass warns when some configs are uncalibrated and refuses a
        graph none of whose configs is (quantized, never calibrated).

        Raises:
            ValueError: the graph is not at the pass's stage, or ``batches`` is empty for
                a pass that needs data.
        """
        quantized = bool(quantable_operations(graph))
        if self.stage == 'float' and quantized:
            raise ValueError(f'PTQ pass {self!r} runs on the FP32 graph before quantization; '
                             f'graph {graph.name!r} is quantized already: list it first')
        if self.stage == 'calibrated':
            if not quantized:
                raise ValueError(f'PTQ pass {self!r} runs on a calibrated graph; graph '
                                 f'{graph.name!r} has no quantized operation')
            uncalibrated, total = uncalibrated_configs(graph)
            check_calibrated(graph, f'PTQ pass {self!r}', error=uncalibrated == total)
        try:
            result = self.call(graph, list(batches), device)
            graph.check()
        except Exception as error:
            error.add_note(f'while running PTQ pass {self!r} on graph {graph.name!r}')
            raise
        logger.info('%r: %d changes on graph %r', self, result.changes, graph.name)
        return result

    @abc.abstractmethod
    def call(self, graph: BaseGraph, batches: List[Any],
             device: Union[str, torch.device]) -> PassResult:
        """Change ``graph`` in place using ``batches``; return a :class:`PassResult`."""

    def __repr__(self) -> str:
        return type(self).__name__


def name_list(value: Any, name: str, what: str = 'layer') -> Optional[Tuple[str, ...]]:
    """``value``, a list of names or None, as a tuple.

    A pass's option that picks what it works on (``layers``, ``clips``, ``scales``) is
    checked when the pass is built, before any calibration: a bare name would be read
    one character at a time, and refused after calibration as names like ``'c'``.

    Args:
        value: what was given.
        name: the option, for the message (``'AdaRound: layers'``).
        what: what the names name, for the message.

    Raises:
        TypeError: ``value`` is a string, or no list of strings.

    Example:
        >>> name_list(['conv1', 'fc'], 'AdaRound: layers')
        ('conv1', 'fc')
        >>> name_list('conv1', 'AdaRound: layers')
        Traceback (most recent call last):
        ...
        TypeError: AdaRound: layers must be a list of layer names or None, got 'conv1'; \
write [...] around a single name
    """
    if value is None:
        return None
    if (isinstance(value, str) or not isinstance(value, Sequence)
            or not all(isinstance(item, str) for item in value)):
        raise TypeError(f'{name} must be a list of {what} names or None, got {value!r}'
                        + ('; write [...] around a single name' if isinstance(value, str)
                           else ''))
    return tuple(value)


def build_ptq_pass(spec: Any) -> PTQPass:
    """A :class:`PTQPass` from a registered name, a ``dict(type=..., **options)`` or a pass.

    Example:
        >>> build_ptq_pass(dict(type='BiasCorrection')), build_ptq_pass('equalization')
        (BiasCorrection, LayerwiseEqualization)
    """
    return build_component(PTQ_PASSES, spec, base=PTQPass, parameter='ptq pass')


def build_ptq_passes(specs: Sequence[Any]) -> Tuple[List[PTQPass], List[PTQPass]]:
    """The passes of ``specs``, split into the ``'float'`` and the ``'calibrated'`` ones.

    Raises:
        ValueError: a ``'float'`` pass listed after a ``'calibrated'`` one (it would run
            on a graph quantized already); the message names both.

    Example:
        >>> floats, calibrated = build_ptq_passes(['equalization', 'bias_correction'])
        >>> floats, calibrated
        ([LayerwiseEqualization], [BiasCorrection])
    """
    passes = [build_ptq_pass(spec) for spec in specs]
    for earlier, later in zip(passes, passes[1:]):
        if earlier.stage == 'calibrated' and later.stage == 'float':
            raise ValueError(f'PTQ pass {later!r} runs on the FP32 graph, so it must come '
                             f'before {earlier!r}, which runs after calibration')
    return ([p for p in passes if p.stage == 'float'],
            [p for p in passes if p.stage == 'calibrated'])


def run_ptq_passes(graph: BaseGraph, passes: Sequence[PTQPass], batches: Sequence[Any],
                   device: Union[str, torch.device] = 'cpu') -> PassResult:
    """Run ``passes`` in order on ``graph``; the result counts every pass's changes.

    Example:
        >>> run_ptq_passes(BaseGraph(), [], []).modified
        False
    """
    changes = 0
    for ptq_pass in passes:
        changes += ptq_pass(graph, batches, device).changes
    return PassResult.counted(graph, changes)
