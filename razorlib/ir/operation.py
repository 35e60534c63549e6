"""Operation: a node of the graph IR, one ONNX operator with its ordered inputs and outputs.

``inputs`` and ``outputs`` are lists of :class:`~razorlib.ir.variable.Variable`; the
variables' ``source_op``/``dest_ops`` are kept in agreement with them by
:class:`~razorlib.ir.graph.BaseGraph`.  A bare operation, or one returned by ``copy()``, is
unlinked.
"""
import copy as copy_lib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from .opsocket import OpSocket, socket_for
from .variable import Variable

__all__ = ['DEFAULT_OPSET', 'Operation', 'Opset', 'UNSPECIFIED_PLATFORM']

UNSPECIFIED_PLATFORM = 'UNSPECIFIED'
"""The platform of an operation no dispatcher has placed yet."""


@dataclass(frozen=True)
class Opset:
    """The operator set an operation's type is defined in.

    Args:
        version: the opset version.  None (the default) is 13 in the default domain, and
            unknown in any other, where no version is common to all: such an operation runs
            in the executor, but :func:`~razorlib.ir.to_onnx` refuses to export it.
        domain: the operator domain; ``''`` is the default ONNX domain, which ``'ai.onnx'``
            also names and is stored as.

    Example:
        >>> Opset(13), Opset(1, domain='com.microsoft')
        (Opset(version=13, domain=''), Opset(version=1, domain='com.microsoft'))
        >>> Opset(17, domain='ai.onnx'), Opset(domain='com.example').version
        (Opset(version=17, domain=''), None)
    """
    version: Optional[int] = None
    domain: str = ''

    def __post_init__(self) -> None:
        # One spelling per domain: the exporter writes one import per domain, and passes and
        # kernels test ``domain == ''``.
        if self.domain == 'ai.onnx':
            object.__setattr__(self, 'domain', '')
        if self.version is None and not self.domain:
            object.__setattr__(self, 'version', 13)


DEFAULT_OPSET = Opset()


class Operation:
    """A node of the graph: an operator type, its attributes and its ordered tensors.

    Args:
        name: unique name of the operation inside its graph.
        op_type: the ONNX op type, e.g. ``'Conv'``; stored as ``type``.
        attributes: the ONNX attributes; copied into a new dict.
        opset: an :class:`Opset`, or an int taken as a version of the default domain.
        platform: where the operation will run; any value, ``'UNSPECIFIED'`` until a
            quantization dispatcher places the operation.
        extension_attrib: razorlib's own annotations, never exported to ONNX.

    Example:
        >>> op = Operation('conv1', 'Conv', attributes={'kernel_shape': [3, 3]}, opset=17)
        >>> op.type, op.opset, op.num_of_input
        ('Conv', Opset(version=17, domain=''), 0)
    """

    def __init__(self, name: str, op_type: str, attributes: Optional[Dict[str, Any]] = None,
                 opset: Union[int, Opset] = DEFAULT_OPSET, platform: Any = UNSPECIFIED_PLATFORM,
                 extension_attrib: Optional[Dict[str, Any]] = None) -> None:
        self.name = name
        self.type = op_type
        self.attributes: Dict[str, Any] = dict(attributes or {})
        self.opset = opset if isinstance(opset, Opset) else Opset(int(opset))
        self.platform = platform
        self.extension_attrib: Dict[str, Any] = dict(extension_attrib or {})
        self.inputs: List[Variable] = []
        self.outputs: List[Variable] = []

    @property
    def parameters(self) -> Tuple[Variable, ...]:
        """The inputs that are parameters, in input order (a read-only view)."""
        return tuple(var for var in self.inputs if var.is_parameter)

    @property
    def num_of_parameter(self) -> int:
        """How many inputs are parameters."""
        return len(self.parameters)

    @property
    def num_of_input(self) -> int:
        """How many inputs the operation has, parameters included."""
        return len(self.inputs)

    @property
    def num_of_output(self) -> int:
        """How many outputs the operation has."""
        return len(self.outputs)

    @property
    def socket(self) -> OpSocket:
        """The roles of the inputs and outputs, from :data:`~razorlib.ir.opsocket.SOCKET_RULES`."""
        return socket_for(self.type, self.num_of_input, self.num_of_output)

    def copy(self) -> 'Operation':
        """An unlinked copy: same name, type, attributes, opset and platform; no tensors.

        Attributes and ``extension_attrib`` are deep-copied, so editing the copy's leaves
        this operation's untouched.
        """
        return Operation(self.name, self.type, copy_lib.deepcopy(self.attributes), self.opset,
                         self.platform, copy_lib.deepcopy(self.extension_attrib))

    def __repr__(self) -> str:
        inputs = [var.name for var in self.inputs]
        outputs = [var.name for var in self.outputs]
        return (f'{type(self).__name__}(name={self.name!r}, type={self.type!r}, '
                f'inputs={inputs}, outputs={outputs})')
