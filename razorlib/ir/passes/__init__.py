"""Graph passes in the onnx-ir style: GraphPass, PassResult and PassManager.

A pass is a small class, configured when built, whose ``call(graph)`` rewrites the graph in
place and returns ``PassResult(graph, modified, changes)``; calling the pass checks its
requirements before and ``graph.check()`` after.  Every pass is registered in
:data:`razorlib.registry.GRAPH_PASSES` under its class name and a short alias, so a
:class:`PassManager` (or a config) lists them as names or dicts.  After every pass the
graph computes what it computed before.

==========================  =======================  ===============================================
class                       alias                    rewrite
==========================  =======================  ===============================================
``FormatConstant``          ``format_constant``      Constant operations become parameters
``FormatParameter``         ``format_parameter``     one copy of a shared parameter per reader
``FuseBatchNorm``           ``fuse_bn``              BatchNormalization folded into Conv/Gemm/MatMul
``FuseGemm``                ``fuse_gemm``            2-D MatMul + constant Add -> Gemm
``FuseBiasAdd``             ``fuse_bias_add``        per-channel constant Add -> the layer's bias
``FuseLayerNorm``           ``fuse_layernorm``       primitive LayerNorm -> LayerNormalization
``FuseGelu``                ``fuse_gelu``            Erf GELU -> Gelu
``ReduceMeanToGlobalPool``  ``reduce_mean_to_pool``  spatial ReduceMean -> GlobalAveragePool
``DeleteIsolated``          ``delete_isolated``      what no graph output needs goes
==========================  =======================  ===============================================

Example:
    >>> from razorlib.ir import BaseGraph
    >>> result = PassManager(['format_constant', 'delete_isolated'])(BaseGraph())
    >>> result.modified
    False
"""
from .base import GraphPass, PassResult
from .dead_code import DeleteIsolated
from .format_constant import FormatConstant
from .format_parameter import FormatParameter
from .fuse_bias_add import FuseBiasAdd
from .fuse_bn import FuseBatchNorm
from .fuse_gelu import FuseGelu
from .fuse_gemm import FuseGemm
from .fuse_layernorm import FuseLayerNorm
from .global_pool import ReduceMeanToGlobalPool
from .manager import PassManager, build_pass

__all__ = ['DeleteIsolated', 'FormatConstant', 'FormatParameter', 'FuseBatchNorm', 'FuseBiasAdd',
           'FuseGelu', 'FuseGemm', 'FuseLayerNorm', 'GraphPass', 'PassManager', 'PassResult',
           'ReduceMeanToGlobalPool', 'build_pass']
