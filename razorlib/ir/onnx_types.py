"""ONNX element types and tensors as torch dtypes and tensors, both ways, without Python lists.

:data:`ONNX_TO_TORCH` is the one table between ONNX's ``TensorProto.DataType`` codes and
torch dtypes; :func:`tensor_from_onnx` and :func:`tensor_to_onnx` move tensor bytes across
(through numpy one way, raw bytes the other), so large weights never become Python lists.
"""
from typing import Dict, Optional

import numpy as np
import torch
from onnx import TensorProto, numpy_helper

__all__ = ['ONNX_TO_TORCH', 'TORCH_TO_ONNX', 'onnx_dtype', 'tensor_from_onnx',
           'tensor_to_onnx', 'torch_dtype']

ONNX_TO_TORCH: Dict[int, torch.dtype] = {
    TensorProto.FLOAT: torch.float32, TensorProto.DOUBLE: torch.float64,
    TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16,
    TensorProto.UINT8: torch.uint8, TensorProto.INT8: torch.int8,
    TensorProto.UINT16: torch.uint16, TensorProto.INT16: torch.int16,
    TensorProto.UINT32: torch.uint32, TensorProto.INT32: torch.int32,
    TensorProto.UINT64: torch.uint64, TensorProto.INT64: torch.int64,
    TensorProto.BOOL: torch.bool,
    TensorProto.COMPLEX64: torch.complex64, TensorProto.COMPLEX128: torch.complex128,
    TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: torch.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
}
"""ONNX ``TensorProto.DataType`` code -> torch dtype, for every type both sides have."""

TORCH_TO_ONNX: Dict[torch.dtype, int] = {dtype: code for code, dtype in ONNX_TO_TORCH.items()}
"""torch dtype -> ONNX ``TensorProto.DataType`` code."""


def torch_dtype(code: int) -> Optional[torch.dtype]:
    """The torch dtype of an ONNX element type; None for ``UNDEFINED`` (0).

    Args:
        code: a ``TensorProto.DataType`` value.

    Raises:
        TypeError: an ONNX type torch has no dtype for (strings, 4-bit types, ...).

    Example:
        >>> torch_dtype(TensorProto.INT64), torch_dtype(TensorProto.UNDEFINED)
        (torch.int64, None)
    """
    if code == TensorProto.UNDEFINED:
        return None
    if code not in ONNX_TO_TORCH:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise TypeError(f'ONNX element type {name} has no torch dtype')
    return ONNX_TO_TORCH[code]


def onnx_dtype(dtype: Optional[torch.dtype]) -> int:
    """The ONNX element type of a torch dtype; ``UNDEFINED`` (0) for None.

    Example:
        >>> onnx_dtype(torch.float16) == TensorProto.FLOAT16
        True
    """
    if dtype is None:
        return TensorProto.UNDEFINED
    if dtype not in TORCH_TO_ONNX:
        raise TypeError(f'torch dtype {dtype} has no ONNX element type')
    return TORCH_TO_ONNX[dtype]


def tensor_from_onnx(proto: TensorProto) -> torch.Tensor:
    """A torch tensor holding a copy of an ONNX tensor's data (external data must be loaded).

    Types numpy lacks (bfloat16, float8) come through as same-width integers and are
    reinterpreted, bit for bit.

    Args:
        proto: the ONNX tensor.

    Example:
        >>> from onnx import helper
        >>> proto = helper.make_tensor('w', TensorProto.FLOAT, [2], [1.5, -2.0])
        >>> tensor_from_onnx(proto)
        tensor([ 1.5000, -2.0000])
    """
    dtype = torch_dtype(proto.data_type)
    array = numpy_helper.to_array(proto)
    if array.dtype.kind not in 'biufc':  # ml_dtypes' bfloat16 and float8 types
        array = array.view(np.dtype(f'uint{array.dtype.itemsize * 8}'))
    return torch.from_numpy(array.copy()).view(dtype)


def tensor_to_onnx(tensor: torch.Tensor, name: str = '') -> TensorProto:
    """An ONNX tensor holding ``tensor``'s bytes as ``raw_data`` (copied to the CPU first).

    Args:
        tensor: the tensor; any dtype in :data:`TORCH_TO_ONNX`.
        name: the name of the ONNX tensor.

    Example:
        >>> proto = tensor_to_onnx(torch.tensor([[1, 2]]), 'shape')
        >>> proto.name, list(proto.dims), proto.data_type == TensorProto.INT64
        ('shape', [1, 2], True)
    """
    data = tensor.detach().to('cpu').contiguous()
    proto = TensorProto(name=name, data_type=onnx_dtype(data.dtype), dims=data.shape)
    # An empty tensor (an exporter's empty Resize roi, empty axes) may carry a zero stride,
    # which ``view`` refuses; it has no bytes to write anyway.
    proto.raw_data = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() \
        else b''
    return proto
