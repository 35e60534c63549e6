"""Observer: watches a tensor over many batches, then renders a quantization config from it.

An observer reduces what it sees to a range ``[lo, hi]`` (one per channel when it observes
per channel); :func:`range_to_scale_offset` turns the range into the config's scale and
offset, following the config's symmetry and integer range.
"""
from typing import ClassVar, Optional, Tuple, Type, TypeVar

import torch

from ...ir import QuantizationProperty, QuantizationStates, TensorQuantizationConfig
from ...ir.components import registered
from ...registry import OBSERVERS

__all__ = ['MIN_SCALE', 'OBSERVERS', 'Observer', 'build_observer', 'observer_class',
           'range_to_scale_offset', 'register_observer']

MIN_SCALE = 2.0**-23
"""The smallest scale rendered, so a constant-zero tensor still gets a usable config."""

_ObserverClass = TypeVar('_ObserverClass', bound=type)


def register_observer(cls: _ObserverClass) -> _ObserverClass:
    """Class decorator: register an observer in :data:`~razorlib.registry.OBSERVERS` under
    its class name and its short ``name`` (what configs' ``observer_algorithm`` holds).

    Example:
        >>> @register_observer
        ... class ZeroObserver(Observer):
        ...     name = 'zero'
        >>> observer_class('zero') is observer_class('ZeroObserver') is ZeroObserver
        True
        >>> for key in ('zero', 'ZeroObserver'):
        ...     del OBSERVERS.module_dict[key]
    """
    OBSERVERS.register_module(name=[cls.__name__, cls.name], module=cls)
    return cls


def observer_class(key: str) -> Type['Observer']:
    """The observer class registered under ``key`` (a class name or a short name).

    Raises:
        KeyError: no observer has that name; the message lists the registered ones.

    Example:
        >>> observer_class('kl').__name__, observer_class('KLObserver').name
        ('KLObserver', 'kl')
    """
    return registered(OBSERVERS, key)


_RENDERABLE = (QuantizationStates.INITIAL, QuantizationStates.ACTIVATED)


def range_to_scale_offset(lo: torch.Tensor, hi: torch.Tensor,
                          config: TensorQuantizationConfig
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The scale and offset that map ``[lo, hi]`` onto the config's integers.

    Symmetrical: ``scale = max(|lo|, |hi|) / quant_max`` and offset 0.  Asymmetrical: the
    range is widened to hold 0, ``scale = (hi - lo) / (quant_max - quant_min)`` and
    ``offset = quant_min - round(lo / scale)``.  Scales are at least :data:`MIN_SCALE`,
    and rounded up to a power of two under ``POWER_OF_2``.

    Args:
        lo: the range's lower ends (any shape).
        hi: the range's upper ends, shaped like ``lo``.
        config: gives the policy and the integer range.

    Returns:
        ``(scale, offset)``, shaped like ``lo``, float32.

    Example:
        >>> from razorlib.ir import QuantizationProperty as P
        >>> asym = TensorQuantizationConfig(P.PER_TENSOR | P.LINEAR | P.ASYMMETRICAL,
        ...                                 quant_min=0, quant_max=255)
        >>> range_to_scale_offset(torch.tensor(-1.0), torch.tensor(4.1), asym)
        (tensor(0.0200), tensor(50.))
    """
    lo, hi = lo.float(), hi.float()
    if QuantizationProperty.SYMMETRICAL in config.policy:
        scale = torch.maximum(lo.abs(), hi.abs()) / config.quant_max
    else:
        lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
        scale = (hi - lo) / (config.quant_max - config.quant_min)
    scale = scale.clamp(min=MIN_SCALE)
    if QuantizationProperty.POWER_OF_2 in config.policy:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    if QuantizationProperty.SYMMETRICAL in config.policy:
        return scale, torch.zeros_like(scale)
    offset = (config.quant_min - torch.round(lo / scale)).clamp(config.quant_min,
                                                                config.quant_max)
    return scale, offset


class Observer:
    """Base of the observers: collects per-channel (or whole-tensor) statistics, renders.

    Subclasses set ``name`` and implement ``_update`` (fold in a batch, as rows: one row
    per channel, one row for a per-tensor observer) and ``_range`` (the range to render).

    Args:
        channel_axis: the axis that holds the channels of a per-channel config; None
            observes the whole tensor.

    Example:
        >>> observer = build_observer(TensorQuantizationConfig())
        >>> observer.observe(torch.tensor([-0.5, 2.54]))
        >>> config = TensorQuantizationConfig()
        >>> observer.render(config)
        >>> config.scale, config.state.name
        (tensor(0.0200), 'ACTIVATED')
    """
    name: ClassVar[str]

    def __init__(self, channel_axis: Optional[int] = None) -> None:
        self.channel_axis = channel_axis
        self._ndim: Optional[int] = None
        self._num_rows: Optional[int] = None

    def observe(self, tensor: torch.Tensor) -> None:
        """Fold one batch into the statistics.

        Raises:
            ValueError: the tensor is empty or not finite; or, observing per channel, its
                rank or channel count differs from earlier batches, or it has no axis
                ``channel_axis``.
        """
        rows = self._rows(tensor.detach())
        self._update(rows)

    def render(self, config: TensorQuantizationConfig) -> None:
        """Write scale and offset into ``config`` and set its state to ACTIVATED.

        Args:
            config: an INITIAL or ACTIVATED config; per-channel exactly when the observer
                observes per channel, on the same axis.

        Raises:
            RuntimeError: nothing was observed yet.
            ValueError: the config is in another state, or its granularity or channel
                axis differs from the observer's.
        """
        if self._num_rows is None:
            raise RuntimeError(f'{type(self).__name__}: observe at least one tensor before '
                               'rendering a config')
        if config.state not in _RENDERABLE:
            raise ValueError(f'{type(self).__name__}: only INITIAL or ACTIVATED configs are '
                             f'rendered, this one is {config.state.name}')
        self._check_granularity(config)
        lo, hi = self._range(config)
        scale, offset = range_to_scale_offset(lo, hi, config)
        if self.channel_axis is None:
            scale, offset = scale.reshape(()), offset.reshape(())
        config.scale, config.offset = scale, offset
        config.state = QuantizationStates.ACTIVATED

    def _rows(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.numel() == 0:
            raise ValueError(f'{type(self).__name__}: cannot observe an empty tensor')
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f'{type(self).__name__}: the tensor holds inf or nan; find where '
                             'the model overflows before calibrating')
        if self.channel_axis is not None and self._ndim not in (None, tensor.dim()):
            raise ValueError(f'{type(self).__name__}: got a tensor of rank {tensor.dim()} '
                             f'after tensors of rank {self._ndim}')
        if self.channel_axis is None:
            rows = tensor.reshape(1, -1)
        elif -tensor.dim() <= self.channel_axis < tensor.dim():
            rows = tensor.movedim(self.channel_axis, 0).reshape(tensor.shape[self.channel_axis], -1)
        else:
            raise ValueError(f'{type(self).__name__}: channel_axis {self.channel_axis} is out '
                             f'of range for a tensor of shape {tuple(tensor.shape)}')
        if self._num_rows is not None and rows.shape[0] != self._num_rows:
            raise ValueError(f'{type(self).__name__}: got {rows.shape[0]} channels after '
                             f'batches of {self._num_rows}')
        self._ndim, self._num_rows = tensor.dim(), rows.shape[0]
        return rows.float()

    def _check_granularity(self, config: TensorQuantizationConfig) -> None:
        per_channel = QuantizationProperty.PER_CHANNEL in config.policy
        observed_axis = None if self.channel_axis is None else self.channel_axis % self._ndim
        wanted_axis = config.channel_axis % self._ndim if per_channel else None
        if observed_axis != wanted_axis:
            raise ValueError(f'{type(self).__name__} observed channel axis {self.channel_axis}, '
                             f'the config wants {wanted_axis} (None: per tensor)')

    def _update(self, rows: torch.Tensor) -> None:
        """Fold ``rows`` (channels x values, float32) into the statistics."""
        raise NotImplementedError

    def _range(self, config: TensorQuantizationConfig) -> Tuple[torch.Tensor, torch.Tensor]:
        """The range ``(lo, hi)`` to render, one entry per row, for ``config``."""
        raise NotImplementedError


def build_observer(config: TensorQuantizationConfig, **options) -> Observer:
    """The observer ``config.observer_algorithm`` names, on the config's channel axis.

    Args:
        config: a config; a per-channel one gets a per-channel observer.
        **options: passed to the observer's constructor (``percentile=99.9``, ``bins=...``).

    Returns:
        A new observer.

    Raises:
        KeyError: no observer has that name; the message lists the registered ones.

    Example:
        >>> build_observer(TensorQuantizationConfig(observer_algorithm='kl')).name
        'kl'
    """
    per_channel = QuantizationProperty.PER_CHANNEL in config.policy
    return observer_class(config.observer_algorithm)(
        channel_axis=config.channel_axis if per_channel else None, **options)
