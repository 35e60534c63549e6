"""onnxruntime sessions for exported INT8 QDQ models that compute what the model says.

With its default (all) graph optimizations onnxruntime fuses a QDQ model's
QuantizeLinear/DequantizeLinear pairs into integer kernels.  On an x86 CPU without VNNI
those multiply uint8 by int8 with ``vpmaddubsw``, which adds pairs of products in int16 and
clips them (the reason onnxruntime's own quantizer offers ``reduce_range``): a model
razorlib and onnxruntime both compute to float rounding unfused came out tens of output
steps off fused (docs/quantization/ptq.md, agreement with onnxruntime).  Basic
optimizations (constant folding, redundant-node removal) do not fuse QDQ, so
:func:`int8_session` uses them on such CPUs and onnxruntime's defaults elsewhere; an INT8
accuracy measured through it is the model's, not the kernel's.

>>> import onnx, torch
>>> from onnx import helper
>>> node = helper.make_node('Relu', ['x'], ['y'])
>>> model = helper.make_model(helper.make_graph(
...     [node], 'g', [helper.make_tensor_value_info('x', onnx.TensorProto.FLOAT, [2])],
...     [helper.make_tensor_value_info('y', onnx.TensorProto.FLOAT, [2])]))
>>> session = int8_session(model.SerializeToString())
>>> session.run(None, {'x': torch.tensor([-1.0, 2.0]).numpy()})[0].tolist()
[0.0, 2.0]
>>> optimization_level() in ('basic', 'all')
True
"""
import functools
import os
from typing import Optional, Union

import onnxruntime as ort

__all__ = ['INT8_KERNELS_SATURATE', 'int8_kernels_saturate', 'int8_session',
           'optimization_level']

INT8_KERNELS_SATURATE = ('onnxruntime fuses QDQ into int8 kernels that saturate on this x86 '
                         'CPU without VNNI (u8 x s8 pairs summed in int16)')
"""Why an optimized session's INT8 outputs are not the model's on this CPU (see
:func:`int8_kernels_saturate`)."""

_VNNI_FLAGS = frozenset({'avx512_vnni', 'avx_vnni', 'amx_int8'})


@functools.lru_cache(maxsize=None)
def int8_kernels_saturate(cpuinfo: str = '/proc/cpuinfo') -> bool:
    """Whether this is an x86 CPU with AVX2 but no VNNI, where onnxruntime's fused u8 x s8
    kernels saturate.  False where ``cpuinfo`` cannot be read (not Linux, not x86): there
    onnxruntime's kernels do not take that path."""
    try:
        with open(cpuinfo) as info:
            flags = next((line.split(':', 1)[1].split() for line in info
                          if line.startswith('flags')), None)
    except OSError:
        return False
    return flags is not None and 'avx2' in flags and not _VNNI_FLAGS & set(flags)


def optimization_level(optimized: Optional[bool] = None) -> str:
    """The graph optimization level :func:`int8_session` uses: ``'all'`` (onnxruntime's
    default) when ``optimized`` or, by default, where the int8 kernels are exact;
    ``'basic'`` on a CPU where they saturate; ``'none'`` when ``optimized`` is False."""
    if optimized is None:
        return 'basic' if int8_kernels_saturate() else 'all'
    return 'all' if optimized else 'none'


_LEVELS = {'all': ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
           'basic': ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
           'none': ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


def int8_session(model: Union[str, os.PathLike, bytes],
                 optimized: Optional[bool] = None) -> ort.InferenceSession:
    """A CPU :class:`onnxruntime.InferenceSession` of ``model`` (a path or serialized
    bytes) at :func:`optimization_level` ``(optimized)``."""
    options = ort.SessionOptions()
    options.graph_optimization_level = _LEVELS[optimization_level(optimized)]
    source = model if isinstance(model, bytes) else os.fspath(model)
    return ort.InferenceSession(source, options, providers=['CPUExecutionProvider'])
