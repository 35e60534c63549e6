"""DispatchingTable: per-operation platform overrides that take precedence over a dispatcher."""
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from ..platform import PlatformKind, TargetPlatform, as_platform

__all__ = ['DispatchingTable']

_PLACEABLE_KINDS = (PlatformKind.QUANTIZED, PlatformKind.FLOATING, PlatformKind.SHAPE_OR_INDEX)


class DispatchingTable:
    """Operation name -> platform, for the operations a dispatcher must not decide.

    Only platforms an operation can run on are accepted: a quantized platform, FP32, FP16
    or SOI.  :func:`~razorlib.quantization.dispatch.dispatch_graph` pins the listed
    operations before its dispatcher runs, so a rule that looks at neighbours (the
    conservative one) sees the overrides.

    Args:
        overrides: ``op name -> platform`` (a :class:`TargetPlatform` or its name).

    Raises:
        TypeError: a name is not a string, or a platform neither a platform nor a string.
        ValueError: a platform no operation can run on (UNSPECIFIED).

    Example:
        >>> table = DispatchingTable({'head': 'FP32'})
        >>> table['stem'] = TargetPlatform.TRT_INT8
        >>> table
        DispatchingTable({'head': 'FP32', 'stem': 'TRT_INT8'})
        >>> table['head']
        <TargetPlatform.FP32: 'FP32'>
    """

    def __init__(self, overrides: Optional[Mapping[str, Any]] = None) -> None:
        self._overrides: Dict[str, TargetPlatform] = {}
        for name, platform in (overrides or {}).items():
            self[name] = platform

    def __setitem__(self, op_name: str, platform: Any) -> None:
        if not isinstance(op_name, str):
            raise TypeError(f'dispatching_table: operation names must be strings, got '
                            f'{type(op_name).__name__} {op_name!r}')
        platform = as_platform(platform, parameter=f'dispatching_table[{op_name!r}]')
        if platform.kind not in _PLACEABLE_KINDS:
            raise ValueError(f'dispatching_table[{op_name!r}]: {platform.name} is not a '
                             'platform an operation runs on; use a quantized platform, FP32, '
                             'FP16 or SOI')
        self._overrides[op_name] = platform

    def __getitem__(self, op_name: str) -> TargetPlatform:
        return self._overrides[op_name]

    def __contains__(self, op_name: object) -> bool:
        return op_name in self._overrides

    def __iter__(self) -> Iterator[str]:
        return iter(self._overrides)

    def __len__(self) -> int:
        return len(self._overrides)

    def items(self) -> Iterator[Tuple[str, TargetPlatform]]:
        """``(op name, platform)`` pairs, in insertion order."""
        return iter(self._overrides.items())

    def __repr__(self) -> str:
        entries = {name: platform.name for name, platform in self._overrides.items()}
        return f'DispatchingTable({entries})'
