"""PTQSettings: the ``ptq`` section of a PTQ config, as one typed, printable object.

A PTQ config file (``configs/quantization/ptq/*.py``) holds the model's config (through
``_base_``) and a ``ptq`` dict; ``tools/ptq.py`` reads it with :meth:`PTQSettings.from_config`
and hands :meth:`PTQSettings.quantize_kwargs` to
:func:`~razorlib.quantization.quantize_torch_model`, which takes the same names and dicts.
"""
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from ..ir.components import registered, split_type
from ..registry import EXPORTERS
from .api import DEFAULT_PASSES, check_options, check_quantize_arguments
from .platform import (ExportFormat, TargetPlatform, as_export_format, as_platform,
                       is_quantized_platform)

__all__ = ['PTQSettings']

Spec = Union[str, Dict[str, Any]]


@dataclass
class PTQSettings:
    """What post-training quantization does; every field has the API's default.

    Args:
        platform: the quantized platform, ``'TRT_INT8'`` or ``'ORT_INT8'``.
        observer: the activations' observer: a name or ``dict(type=..., **options)``.
        dispatcher: a dispatcher's name or ``dict(type=...)``.
        calib_steps: how many calibration batches at most.
        dynamic_batch: export with a symbolic batch axis (any batch size).
        passes: the graph passes run before quantizing (names or dicts).
        ptq_passes: the PTQ passes that use calibration data (names or dicts, see
            :mod:`razorlib.quantization.passes`): ``'float'`` ones before quantizing,
            the others after calibration, in the order given.
        export: the export format (``'QDQ_ONNX'``, ``'TRT_JSON'``, ``'ONNX'``, a dict),
            or None for the platform's default.

    Every value is checked when the settings are made, and an error names the setting
    (see :func:`~razorlib.quantization.api.check_quantize_arguments`): the options of an
    observer, dispatcher, pass or export dict must be keyword parameters of its class (or
    exporter); ``passes`` and ``ptq_passes`` are lists, never a bare name.

    Raises:
        KeyError: an observer, dispatcher, graph pass or PTQ pass that is not registered.
        TypeError: a value of the wrong type (``calib_steps='8'``, ``dynamic_batch='no'``,
            ``passes='FuseBatchNorm'``), an option that its class does not take.
        ValueError: a platform that is not quantized, an unknown export format, or
            ``calib_steps`` below 1.

    Example:
        >>> settings = PTQSettings.from_config(dict(
        ...     platform='ORT_INT8', observer=dict(type='KLObserver'), calib_steps=8))
        >>> settings.quantize_kwargs()['observer'], settings.export_format.name
        ({'type': 'KLObserver'}, 'QDQ_ONNX')
        >>> PTQSettings.from_config(dict(observers='kl'))
        Traceback (most recent call last):
        ...
        KeyError: 'ptq.observers: no such setting; the settings are platform, observer, \
dispatcher, calib_steps, dynamic_batch, passes, export, ptq_passes'
        >>> PTQSettings.from_config(dict(observer=dict(type='kl', binz=3)))
        Traceback (most recent call last):
        ...
        TypeError: ptq.observer: KLObserver.__init__() got an unexpected keyword argument \
'binz' (did you mean 'bins'?); KLObserver takes bins
    """
    platform: str = 'TRT_INT8'
    observer: Spec = 'percentile'
    dispatcher: Spec = 'conservative'
    calib_steps: int = 32
    dynamic_batch: bool = True
    passes: Tuple[Spec, ...] = field(default=DEFAULT_PASSES)
    export: Optional[Spec] = None
    ptq_passes: Tuple[Spec, ...] = ()

    def __post_init__(self) -> None:
        if not is_quantized_platform(self.platform):
            raise ValueError(f'ptq.platform: {self.platform!r} is not a quantized platform '
                             '(TRT_INT8, ORT_INT8)')
        self.platform = as_platform(self.platform).name
        check_quantize_arguments('ptq.', calib_steps=self.calib_steps, observer=self.observer,
                                 dispatcher=self.dispatcher, passes=self.passes,
                                 ptq_passes=self.ptq_passes, dynamic_batch=self.dynamic_batch)
        self.passes = tuple(self.passes)
        self.ptq_passes = tuple(self.ptq_passes)
        export_format = self.export_format  # validates ``export``
        if self.export is not None:
            options = split_type(self.export, 'ptq.export')[1]
            check_options(registered(EXPORTERS, export_format.name), options, 'ptq.export',
                          skip=['graph', 'path'])

    @classmethod
    def from_config(cls, section: Optional[Mapping[str, Any]],
                    **overrides: Any) -> 'PTQSettings':
        """Settings from a config's ``ptq`` dict, then ``overrides`` that are not None.

        Raises:
            KeyError: a key that is no setting; the message lists the settings.
        """
        names = [item.name for item in fields(cls)]
        values = dict(section or {})
        for key in values:
            if key not in names:
                raise KeyError(f'ptq.{key}: no such setting; the settings are '
                               f'{", ".join(names)}')
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)

    @property
    def export_format(self):
        """The :class:`~razorlib.quantization.ExportFormat` written (the platform's default
        when ``export`` is None)."""
        kind = (self.platform if self.export is None
                else split_type(self.export, 'ptq.export')[0])
        return as_export_format(kind, parameter='ptq.export')

    def export_refusal(self, export: str = 'ptq.export',
                       platform: str = 'ptq.platform') -> Optional[str]:
        """Why the graph these settings quantize cannot be written as ``export`` says, or
        None; ``export`` and ``platform`` are the settings' names in the caller's words.

        ``export_graph`` refuses a platform's name other than the graph's (``'TRT_INT8'``
        for an ORT_INT8 graph) and ``TRT_JSON`` for anything but TRT_INT8 (TensorRT's
        ranges are symmetric and per tensor), but only once there is a graph: a caller
        that exports after calibrating or training (``tools/ptq.py``, ``QAT``) asks here
        first, so that such a config fails before the work.

        Example:
            >>> PTQSettings(platform='ORT_INT8', export='TRT_INT8').export_refusal()
            'ptq.export TRT_INT8: the graph is quantized for ptq.platform ORT_INT8, and an \
export for TRT_INT8 would not be its model; name an export format (ONNX, QDQ_ONNX, \
TRT_JSON) or the same platform'
            >>> PTQSettings(platform='ORT_INT8', export='QDQ_ONNX').export_refusal() is None
            True
        """
        if self.export is not None:
            kind = split_type(self.export, 'ptq.export')[0]
            named = str(getattr(kind, 'name', kind)).upper()
            if named in TargetPlatform.__members__ and named != self.platform:
                formats = ', '.join(member.name for member in ExportFormat)
                return (f'{export} {named}: the graph is quantized for {platform} '
                        f'{self.platform}, and an export for {named} would not be its model; '
                        f'name an export format ({formats}) or the same platform')
        if self.export_format is ExportFormat.TRT_JSON and self.platform != 'TRT_INT8':
            return (f'{export} TRT_JSON: TensorRT dynamic ranges are symmetric and per tensor, '
                    f'so they need the TRT_INT8 platform, not {platform} {self.platform}')
        return None

    def quantize_kwargs(self) -> Dict[str, Any]:
        """The keyword arguments of ``quantize_torch_model`` these settings give."""
        return dict(platform=self.platform, observer=self.observer, dispatcher=self.dispatcher,
                    calib_steps=self.calib_steps, dynamic_batch=self.dynamic_batch,
                    passes=self.passes, ptq_passes=self.ptq_passes)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of the settings (lists for tuples)."""
        values = asdict(self)
        values['passes'] = list(self.passes)
        values['ptq_passes'] = list(self.ptq_passes)
        return values

    def describe(self) -> Sequence[str]:
        """One short phrase per setting, for a log line."""
        observer = split_type(self.observer, 'observer')
        export = self.export_format.name
        options = f' {observer[1]}' if observer[1] else ''
        return [self.platform, f'{observer[0]} activations{options}',
                f'{split_type(self.dispatcher, "dispatcher")[0]} dispatch',
                'dynamic batch' if self.dynamic_batch else 'static batch', f'{export} export'] + (
                    ['PTQ passes ' + ', '.join(split_type(spec, 'ptq pass')[0]
                                               for spec in self.ptq_passes)]
                    if self.ptq_passes else [])
