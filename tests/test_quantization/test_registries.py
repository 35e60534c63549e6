"""The IR and quantization registries: mmengine registries of razorlib's scope, filled on
first use (lazy import), keyed by class names with short aliases."""
import subprocess
import sys

from razorlib.registry import (DISPATCHERS, EXPORTERS, GRAPH_PASSES, KERNELS, OBSERVERS,
                               QUANTIZERS, SCOPE)

BUILD_FROM_A_FRESH_PROCESS = """
from razorlib.registry import (DISPATCHERS, EXPORTERS, GRAPH_PASSES, KERNELS, OBSERVERS,
                               QUANTIZERS)
import sys
assert 'razorlib.quantization' not in sys.modules
print(type(OBSERVERS.build(dict(type='kl', bins=512))).__name__,
      type(DISPATCHERS.build(dict(type='ConservativeDispatcher'))).__name__,
      type(GRAPH_PASSES.build(dict(type='fuse_bn'))).__name__,
      QUANTIZERS.get('TRT_INT8').__name__, EXPORTERS.get('TRT_JSON').__name__,
      KERNELS.get('Conv') is not None)
"""


def test_components_are_built_from_dicts_in_a_fresh_process():
    done = subprocess.run([sys.executable, '-c', BUILD_FROM_A_FRESH_PROCESS],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ['KLObserver', 'ConservativeDispatcher', 'FuseBatchNorm',
                                   'TensorRTQuantizer', 'export_trt_json', 'True']


def test_every_family_is_a_razorlib_registry_with_class_names_and_aliases():
    for registry in (DISPATCHERS, EXPORTERS, GRAPH_PASSES, KERNELS, OBSERVERS, QUANTIZERS):
        assert registry.scope == SCOPE
        registry.import_from_location()
    pairs = [(OBSERVERS, 'KLObserver', 'kl'), (DISPATCHERS, 'AllInDispatcher', 'allin'),
             (QUANTIZERS, 'ORTQDQQuantizer', 'ORT_INT8'),
             (GRAPH_PASSES, 'FuseLayerNorm', 'fuse_layernorm'),
             (GRAPH_PASSES, 'JoinVariableReaders', 'join_variable_readers'),
             (EXPORTERS, 'export_qdq_onnx', 'QDQ_ONNX')]
    for registry, name, alias in pairs:
        assert registry.get(name) is registry.get(alias) is not None, (registry.name, name)
