"""GraphMerger: the passes that fuse operations into fewer, equivalent ones."""
from ..graph import BaseGraph
from .common import graph_method
from .fuse_bias_add import fuse_bias_add
from .fuse_bn import fuse_bn
from .fuse_gelu import fuse_gelu
from .fuse_gemm import fuse_gemm
from .fuse_layernorm import fuse_layernorm
from .fuse_skiplayernorm import fuse_skiplayernorm

__all__ = ['GraphMerger']


class GraphMerger:
    """Fusions on one graph; each changes it in place and returns how many it made.

    ``fuse_bn()`` folds BatchNormalization into Conv, ConvTranspose, Gemm or MatMul;
    ``fuse_gemm()`` turns a 2-D MatMul + Add into Gemm; ``fuse_bias_add()`` folds an Add
    of a per-channel constant into a Conv or Gemm bias; ``fuse_layernorm()`` and
    ``fuse_gelu()`` replace the primitive forms of LayerNorm and GELU;
    ``fuse_skiplayernorm()`` makes onnxruntime's SkipLayerNormalization.  Each keeps the
    names of the graph outputs and leaves ``graph.check()`` true.  See the functions of
    the same names in :mod:`razorlib.ir.passes`.

    Args:
        graph: the graph to work on.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=(2, 3))
        >>> w = graph.create_variable('w', torch.randn(3, 4), is_parameter=True)
        >>> mm = graph.create_operation('MatMul', inputs=[x, w],
        ...                             outputs=[graph.create_variable()])
        >>> b = graph.create_variable('b', torch.zeros(4), is_parameter=True)
        >>> add = graph.create_operation('Add', inputs=[mm.outputs[0], b],
        ...                              outputs=[graph.create_variable('y')])
        >>> merger = GraphMerger(graph)
        >>> merger.fuse_gemm(), merger.fuse_bn(), [op.type for op in graph.operations.values()]
        (1, 0, ['Gemm'])
    """

    def __init__(self, graph: BaseGraph) -> None:
        self.graph = graph

    fuse_bn = graph_method(fuse_bn)
    fuse_gemm = graph_method(fuse_gemm)
    fuse_bias_add = graph_method(fuse_bias_add)
    fuse_layernorm = graph_method(fuse_layernorm)
    fuse_skiplayernorm = graph_method(fuse_skiplayernorm)
    fuse_gelu = graph_method(fuse_gelu)
