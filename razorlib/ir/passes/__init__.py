"""Graph passes: tidying (:class:`GraphFormatter`) and fusing (:class:`GraphMerger`).

Each pass is a function ``pass(graph, ...) -> int`` that changes the graph in place and
returns how much it changed (0: nothing); the two classes bind them to one graph.  After
every pass ``graph.check()`` holds and the graph computes what it computed before.

Example:
    >>> from razorlib.ir import BaseGraph
    >>> from razorlib.ir.passes import delete_isolated
    >>> delete_isolated(BaseGraph())
    0
"""
from .dead_code import delete_isolated
from .format_constant import format_constant
from .format_parameter import format_parameter
from .formatter import GraphFormatter
from .fuse_bias_add import fuse_bias_add
from .fuse_bn import fuse_bn
from .fuse_gelu import fuse_gelu
from .fuse_gemm import fuse_gemm
from .fuse_layernorm import fuse_layernorm
from .fuse_skiplayernorm import SKIP_LAYER_NORM_OPSET, fuse_skiplayernorm
from .merger import GraphMerger
from .truncate import truncate_on_var

__all__ = ['GraphFormatter', 'GraphMerger', 'SKIP_LAYER_NORM_OPSET', 'delete_isolated',
           'format_constant', 'format_parameter', 'fuse_bias_add', 'fuse_bn', 'fuse_gelu',
           'fuse_gemm', 'fuse_layernorm', 'fuse_skiplayernorm', 'truncate_on_var']
