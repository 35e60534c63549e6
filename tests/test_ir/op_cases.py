"""Single-node ONNX test cases for the executor's kernels, one or more per op type.

``CASES`` lists :class:`OpCase` entries; :func:`single_node_model` turns one into an ONNX
model.  Control inputs (index >= 1 and integer or 0-d, Resize's scales, unless ``controls`` says
which)
become initializers in the *constant* variant and graph inputs in the *dynamic* one, so
both ways a kernel reads them are exercised.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from onnx import ModelProto, helper, numpy_helper

_RNG = np.random.default_rng(0)


def f(*shape: int) -> np.ndarray:
    """A float32 array of standard normal values."""
    return _RNG.standard_normal(shape).astype(np.float32)


def pos(*shape: int) -> np.ndarray:
    """A float32 array of values in [0.5, 2)."""
    return _RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def scalar(value, dtype=np.float32) -> np.ndarray:
    return np.array(value, dtype=dtype)


@dataclass
class OpCase:
    """One node: its type, inputs (None: absent), attributes, opset and output count."""
    op_type: str
    inputs: Sequence[Optional[np.ndarray]]
    attributes: Dict = field(default_factory=dict)
    opset: int = 17
    outputs: int = 1
    controls: Optional[Tuple[int, ...]] = None
    label: str = ''

    @property
    def id(self) -> str:
        return f'{self.op_type}-{self.label}' if self.label else self.op_type

    def control_indices(self) -> Tuple[int, ...]:
        if self.controls is not None:
            return self.controls
        return tuple(index for index, array in enumerate(self.inputs)
                     if index >= 1 and array is not None
                     and (array.dtype.kind in 'iu' or array.ndim == 0
                          or self.op_type == 'Resize'))


def case(op_type: str, *inputs, opset: int = 17, outputs: int = 1, controls=None,
         label: str = '', **attributes) -> OpCase:
    return OpCase(op_type, inputs, attributes, opset, outputs, controls, label)


def single_node_model(op_case: OpCase, constant_controls: bool) -> Tuple[ModelProto, Dict]:
    """The model of ``op_case`` and the feeds of its graph inputs."""
    constants = set(op_case.control_indices()) if constant_controls else set()
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for index, array in enumerate(op_case.inputs):
        if array is None:
            names.append('')
            continue
        name = f'input_{index}'
        names.append(name)
        if index in constants:
            initializers.append(numpy_helper.from_array(array, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
            feeds[name] = array
    outputs = [f'output_{index}' for index in range(op_case.outputs)]
    node = helper.make_node(op_case.op_type, names, outputs, name='node', **op_case.attributes)
    graph = helper.make_graph([node], 'case', graph_inputs,
                              [helper.make_empty_tensor_value_info(name) for name in outputs],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', op_case.opset)])
    model.ir_version = 8
    return model, feeds


_X = f(2, 3, 5, 5)
_INTS = np.array([[7, -7, 5], [-5, 9, 4]], dtype=np.int64)
_INT_DIVISORS = np.array([[2, 2, -3], [3, -4, 4]], dtype=np.int64)

_LINEAR: List[OpCase] = [
    case('Conv', _X, f(4, 3, 3, 3), f(4), pads=[1, 1, 1, 1], label='bias'),
    case('Conv', f(1, 2, 9), f(3, 2, 3), strides=[2], label='1d'),
    case('Conv', f(1, 2, 4, 5, 5), f(3, 2, 3, 3, 3), pads=[1, 0, 1, 1, 0, 1], label='3d'),
    case('Conv', _X, f(4, 3, 3, 3), pads=[0, 1, 2, 1], label='asymmetric'),
    case('Conv', f(1, 3, 7, 7), f(2, 3, 3, 3), auto_pad='SAME_UPPER', strides=[2, 2],
         label='same_upper'),
    case('Conv', f(1, 3, 6, 6), f(2, 3, 2, 2), auto_pad='SAME_LOWER', label='same_lower'),
    case('Conv', f(1, 4, 9, 9), f(4, 2, 3, 3), group=2, dilations=[2, 2], auto_pad='VALID',
         label='group_dilation'),
    case('ConvTranspose', f(1, 4, 3, 3), f(4, 2, 3, 3), f(2), strides=[2, 2],
         label='stride'),
    case('ConvTranspose', f(1, 4, 3, 3), f(4, 2, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1],
         output_padding=[1, 1], label='output_padding'),
    case('ConvTranspose', f(1, 4, 3, 3), f(4, 2, 3, 3), f(2), strides=[2, 2],
         pads=[0, 1, 2, 1], label='asymmetric'),
    case('ConvTranspose', f(1, 4, 3, 3), f(4, 2, 3, 3), strides=[2, 2], output_shape=[8, 7],
         label='output_shape'),
    case('ConvTranspose', f(1, 4, 3, 3), f(4, 2, 3, 3), strides=[2, 2], auto_pad='SAME_UPPER',
         label='same_upper'),
    case('ConvTranspose', f(1, 4, 5), f(4, 1, 3), group=2, dilations=[2], label='1d_group'),
    case('Gemm', f(3, 4), f(4, 5), label='plain'),
    case('Gemm', f(4, 3), f(5, 4), f(5), transA=1, transB=1, label='transposed'),
    case('Gemm', f(3, 4), f(5, 4), f(3, 1), transB=1, alpha=0.5, beta=2.0, label='alpha_beta'),
    case('Gemm', f(3, 4), f(5, 4), f(3, 5), transB=1, label='linear'),
    case('MatMul', f(2, 1, 3, 4), f(3, 4, 5), label='batched'),
    case('MatMul', f(4), f(2, 4, 3), label='vector'),
    case('Einsum', f(3, 4), f(4, 5), equation='ij,jk->ik', label='matmul'),
    case('Einsum', f(2, 3, 4), f(2, 4, 5), equation='bij , bjk -> bik', label='spaces'),
    case('Einsum', f(2, 3, 4), f(1, 4, 2), equation='...ij,...jk', label='ellipsis_implicit'),
    case('Einsum', f(3), f(4), equation='i,j', label='outer_implicit'),
    case('Einsum', f(4, 4), equation='ii->i', label='diagonal'),
    case('Einsum', f(3, 4), equation='ij->', label='sum'),
    case('Einsum', f(2, 3), f(3, 4), f(4, 2), equation='ij,jk,kl->li', label='three'),
    case('Einsum', _INTS, i64(1, -2, 3), equation='ij,j->i', label='int'),
]

_ELEMENTWISE: List[OpCase] = [
    *(case(op, f(2, 3, 4), f(3, 1)) for op in ('Add', 'Sub', 'Mul')),
    case('Div', f(2, 3), pos(3), label='float'),
    case('Div', _INTS, _INT_DIVISORS, label='int'),
    case('Pow', pos(2, 3), f(3), label='float'),
    case('Pow', i64(2, 3, 4), i64(3, 2, 1), controls=(), label='int'),
    case('Mod', _INTS, _INT_DIVISORS, controls=(), label='int'),
    case('Mod', f(2, 3), pos(2, 3), fmod=1, label='fmod'),
    *(case(op, f(2, 3), f(2, 3)) for op in ('Equal', 'Less', 'LessOrEqual', 'Greater',
                                            'GreaterOrEqual')),
    *(case(op, f(2, 3) > 0, f(3) > 0, controls=()) for op in ('And', 'Or', 'Xor')),
    case('Not', f(2, 3) > 0),
    case('Where', f(2, 3) > 0, f(2, 3), f(3), controls=()),
    *(case(op, f(2, 3)) for op in ('Abs', 'Neg', 'Exp', 'Erf', 'Floor', 'Ceil', 'Sign', 'Sin',
                                   'Cos')),
    *(case(op, pos(2, 3)) for op in ('Sqrt', 'Reciprocal', 'Log')),
    case('Round', np.array([0.5, 1.5, -2.5, 2.4, -0.6], dtype=np.float32)),
    case('IsNaN', np.array([0.0, np.nan, np.inf], dtype=np.float32)),
    *(case(op, f(2, 3), f(3), f(2, 1)) for op in ('Max', 'Min', 'Sum', 'Mean')),
]

_ACTIVATIONS: List[OpCase] = [
    *(case(op, f(2, 3, 4)) for op in ('Relu', 'Sigmoid', 'Tanh', 'HardSwish', 'Softplus',
                                      'Softsign', 'Elu', 'Celu', 'Selu', 'ThresholdedRelu')),
    case('Mish', f(2, 3, 4), opset=18),
    case('LeakyRelu', f(2, 3), alpha=0.2),
    case('PRelu', f(2, 3, 4), f(3, 1), label='broadcast'),
    case('HardSigmoid', f(2, 3), alpha=0.3, beta=0.4),
    case('Gelu', f(2, 3), opset=20, label='erf'),
    case('Gelu', f(2, 3), opset=20, approximate='tanh', label='tanh'),
    case('Clip', f(2, 3), scalar(-0.5), scalar(0.5), label='bounds'),
    case('Clip', f(2, 3), None, scalar(0.1), label='max_only'),
    case('Clip', f(2, 3), label='none'),
    case('Clip', f(2, 3), opset=6, min=-0.2, max=0.3, label='opset6'),
    case('Softmax', f(2, 3, 4), axis=1, label='axis1'),
    case('Softmax', f(2, 3, 4), opset=11, axis=1, label='opset11_flatten'),
    case('LogSoftmax', f(2, 3, 4), label='last_axis'),
]

_NORMS: List[OpCase] = [
    case('BatchNormalization', _X, f(3), f(3), f(3), pos(3), epsilon=1e-3),
    case('InstanceNormalization', _X, f(3), f(3)),
    case('LayerNormalization', f(2, 3, 4), f(4), f(4), label='last_axis'),
    case('LayerNormalization', f(2, 3, 4), f(3, 4), axis=1, epsilon=1e-3, outputs=3,
         label='axis1_statistics'),
    case('GroupNormalization', f(2, 6, 3), f(3), f(3), num_groups=3, opset=18,
         label='per_group'),
    case('GroupNormalization', f(2, 6, 3), f(6), f(6), num_groups=3, opset=21,
         label='per_channel'),
]

_POOLING: List[OpCase] = [
    case('MaxPool', _X, kernel_shape=[2, 2], strides=[2, 2], label='plain'),
    case('MaxPool', _X, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
         label='pads_ceil'),
    case('MaxPool', f(1, 1, 5, 5), kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
         ceil_mode=1, label='ceil_last_window_in_pad'),
    case('MaxPool', _X, kernel_shape=[2, 3], pads=[0, 1, 1, 2], label='asymmetric'),
    case('MaxPool', f(1, 2, 7, 7), kernel_shape=[2, 2], dilations=[2, 2], label='dilation'),
    case('MaxPool', _X, kernel_shape=[3, 3], auto_pad='SAME_UPPER', strides=[2, 2],
         label='same_upper'),
    case('MaxPool', _X, kernel_shape=[3, 3], pads=[1, 1, 1, 1], outputs=2, label='indices'),
    case('MaxPool', f(2, 3, 8), kernel_shape=[3], strides=[2], label='1d'),
    case('MaxPool', f(1, 2, 4, 4, 4), kernel_shape=[2, 2, 2], strides=[2, 2, 2], label='3d'),
    case('AveragePool', _X, kernel_shape=[3, 3], pads=[1, 1, 1, 1], label='exclude_pad'),
    case('AveragePool', _X, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1,
         label='include_pad'),
    case('AveragePool', _X, kernel_shape=[2, 2], pads=[0, 1, 1, 0], label='asymmetric'),
    case('AveragePool', _X, kernel_shape=[2, 2], pads=[0, 1, 1, 0], count_include_pad=1,
         label='asymmetric_include_pad'),
    case('AveragePool', _X, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, label='ceil'),
    case('AveragePool', f(1, 1, 5, 5), kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
         ceil_mode=1, label='ceil_pads'),
    case('AveragePool', f(1, 2, 4, 4, 4), kernel_shape=[2, 2, 2], label='3d'),
    # ceil_mode with pads torch cannot take: no window may start in the right padding
    case('MaxPool', f(1, 1, 1, 4), kernel_shape=[1, 2], strides=[1, 2], pads=[0, 0, 0, 1],
         ceil_mode=1, label='ceil_asymmetric'),
    case('AveragePool', f(1, 1, 1, 4), kernel_shape=[1, 3], strides=[1, 2],
         pads=[0, 2, 0, 2], ceil_mode=1, label='ceil_large_pads'),
    case('AveragePool', f(1, 1, 1, 4), kernel_shape=[1, 3], strides=[1, 2],
         pads=[0, 2, 0, 2], ceil_mode=1, count_include_pad=1, label='ceil_large_pads_include'),
    case('GlobalAveragePool', _X),
    case('GlobalMaxPool', f(2, 3, 4, 5, 2)),
]

_INDEXING: List[OpCase] = [
    case('Concat', f(2, 3), f(2, 1), f(2, 2), axis=-1),
    case('Split', f(5, 4), i64(2, 3), outputs=2, label='sizes'),
    case('Split', f(2, 6), axis=1, outputs=3, label='equal'),
    case('Split', f(7, 2), outputs=3, num_outputs=3, opset=18, label='uneven'),
    case('Split', f(5, 4), split=[1, 4], opset=11, outputs=2, label='opset11'),
    case('Slice', f(5, 6), i64(1, 0), i64(4, 5), label='starts_ends'),
    case('Slice', f(5, 6, 4), i64(-1, 10), i64(-10, 0), i64(0, 1), i64(-2, -3),
         label='negative_steps'),
    case('Slice', f(5, 6), i64(-3), i64(2**63 - 1), i64(-1), i64(2), label='clamped'),
    case('Slice', f(5, 6), starts=[1], ends=[3], axes=[1], opset=1, label='opset1'),
    case('Slice', f(5, 6), i64(0), i64(-1), i64(1), i64(-1), label='empty_backward'),
    case('Gather', f(5, 4), i64([0, -1], [2, 3]), axis=0, label='matrix'),
    case('Gather', f(3, 5, 4), scalar(-2, np.int64), axis=1, label='scalar'),
    case('GatherElements', f(3, 4), i64([0, -1, 2, 1], [3, 0, 0, 1]), axis=1),
    case('GatherND', f(3, 4, 5), i64([0, 1], [2, -1]), label='slices'),
    case('GatherND', f(3, 4), i64([0, 0], [2, 3], [-1, 1]), label='elements'),
    case('GatherND', f(3, 4, 2), i64([[[2], [0]], [[-2], [1]]]), label='nested_indices'),
    case('GatherND', f(2, 3, 4), i64([[1], [0]], [[2], [2]]), batch_dims=1, label='batch1'),
    case('GatherND', f(2, 3, 4, 5), np.array([[[[3, 4]], [[0, 0]], [[1, 2]]],
                                              [[[2, 1]], [[3, 0]], [[-1, -1]]]]),
         batch_dims=2, label='batch2'),
    case('Pad', f(2, 3, 4), i64(0, 1, 2, 0, 2, 1), scalar(0.5), label='constant'),
    case('Pad', f(2, 3, 4), i64(0, 0, 2, 0, 0, 3), mode='reflect', label='reflect'),
    case('Pad', f(2, 3, 4), i64(0, 2, 1, 0, 1, 3), mode='edge', label='edge'),
    case('Pad', f(2, 3, 4), i64(0, 1, 3, 0, 2, 1), mode='wrap', opset=19, label='wrap'),
    case('Pad', f(2, 3, 4), i64(0, -1, 1, 0, 1, -2), label='negative'),
    case('Pad', f(2, 6), i64(0, -1, 0, 2), mode='wrap', opset=19, label='wrap_cropped'),
    case('Pad', f(2, 3, 4), i64(1, 2), None, i64(-1), opset=18, mode='edge', label='axes'),
    case('Pad', f(2, 3, 4), pads=[0, 1, 0, 0, 1, 0], value=2.0, opset=2, label='opset2'),
]

_SHAPE: List[OpCase] = [
    case('Reshape', f(2, 3, 4), i64(0, -1), label='zero_copies'),
    case('Reshape', f(2, 3, 4), i64(4, 2, 3), allowzero=1, opset=14, label='allowzero'),
    case('Flatten', f(2, 3, 4, 5), axis=2, label='axis2'),
    case('Flatten', f(2, 3, 4), axis=0, label='axis0'),
    case('Flatten', f(2, 3, 4), axis=-1, label='negative'),
    case('Transpose', f(2, 3, 4), perm=[1, 2, 0], label='perm'),
    case('Transpose', f(2, 3, 4), label='reverse'),
    case('Squeeze', f(1, 3, 1, 2), i64(-2), label='axes'),
    case('Squeeze', f(1, 3, 1, 2), label='all'),
    case('Squeeze', f(1, 3, 1, 2), axes=[0], opset=11, label='opset11'),
    case('Unsqueeze', f(3, 2), i64(-1, 0), label='axes'),
    case('Unsqueeze', f(3, 2), axes=[1], opset=11, label='opset11'),
    case('Shape', f(2, 3, 4), label='full'),
    case('Shape', f(2, 3, 4, 5), start=1, end=-1, opset=15, label='start_end'),
    case('Size', f(2, 3, 4)),
    case('Expand', f(3, 1), i64(2, 1, 4)),
    case('Tile', f(2, 3), i64(2, 3)),
    case('Identity', f(2, 3)),
    case('Dropout', f(2, 3), outputs=2, label='mask'),
    case('Cast', f(2, 3) * 5, to=7, label='to_int64'),
    case('Cast', f(2, 3), to=10, label='to_float16'),
    case('CastLike', f(2, 3) * 5, i64(1)),
    case('Constant', value=numpy_helper.from_array(f(2, 3)), label='tensor'),
    case('Constant', value_floats=[1.0, 2.5], label='floats'),
    case('Constant', value_int=3, label='int'),
    case('ConstantOfShape', i64(2, 3), value=numpy_helper.from_array(i64(7))),
    case('Range', scalar(1, np.int64), scalar(10, np.int64), scalar(3, np.int64), label='int',
         controls=()),
    case('Range', scalar(1.5), scalar(-2.0), scalar(-0.5), controls=(), label='float'),
    # The limit on the wrong side of the start: an empty range, not an error.
    case('Range', scalar(5, np.int64), scalar(0, np.int64), scalar(1, np.int64), controls=(),
         label='empty'),
    case('Range', scalar(1.0), scalar(2.0), scalar(-0.5), controls=(), label='float_empty'),
]

_REDUCTIONS: List[OpCase] = [
    case('ReduceMean', _X, axes=[2, 3], opset=13, label='axes_attribute'),
    case('ReduceMean', _X, i64(1, -1), keepdims=0, opset=18, label='axes_input'),
    case('ReduceMean', _X, opset=18, label='all'),
    case('ReduceMean', _X, opset=18, noop_with_empty_axes=1, label='noop'),
    case('ReduceSum', _X, i64(1), opset=13),
    *(case(op, _X, opset=18, noop_with_empty_axes=1, label='noop')  # the elementwise part
      for op in ('ReduceL1', 'ReduceL2', 'ReduceSumSquare')),
    *(case(op, _X, i64(-1, 1), opset=18, keepdims=0)
      for op in ('ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1', 'ReduceL2',
                 'ReduceSumSquare', 'ReduceLogSumExp')),
    case('CumSum', f(3, 4), scalar(1, np.int64), label='plain'),
    case('CumSum', f(3, 4), scalar(0, np.int64), exclusive=1, label='exclusive'),
    case('CumSum', f(3, 4), scalar(-1, np.int64), reverse=1, label='reverse'),
    case('CumSum', f(2, 3, 4), np.array([1], dtype=np.int32), exclusive=1, reverse=1,
         label='exclusive_reverse'),
    case('CumSum', _INTS.astype(np.int32), scalar(1, np.int32), label='int32'),
    case('ArgMax', np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32), axis=1,
         label='first'),
    case('ArgMin', np.array([[1, 0, 0], [2, 2, 0]], dtype=np.float32), axis=1, keepdims=0,
         select_last_index=1, label='last'),
]

_IMAGE = f(1, 2, 4, 6)
_RESIZE: List[OpCase] = [
    case('Resize', _IMAGE, None, None, i64(1, 2, 8, 12), mode='nearest',
         coordinate_transformation_mode='asymmetric', nearest_mode='floor',
         label='nearest_sizes'),
    case('Resize', f(1, 2, 7, 9), None, np.array([1, 1, 0.6, 0.45], dtype=np.float32),
         mode='nearest', label='nearest_down'),
    case('Resize', _IMAGE, None, np.array([1, 1, 1.5, 2.5], dtype=np.float32),
         mode='nearest', nearest_mode='round_prefer_ceil', label='prefer_ceil'),
    case('Resize', _IMAGE, None, np.array([1, 1, 1.7, 0.5], dtype=np.float32),
         mode='nearest', nearest_mode='ceil', coordinate_transformation_mode='align_corners',
         label='nearest_ceil_align'),
    case('Resize', _IMAGE, None, np.array([1, 1, 2, 1.5], dtype=np.float32),
         mode='nearest', coordinate_transformation_mode='tf_half_pixel_for_nn',
         label='tf_half_pixel_for_nn'),
    case('Resize', _IMAGE, None, np.array([1, 1, 2, 1.5], dtype=np.float32), mode='linear',
         label='linear_up'),
    case('Resize', f(1, 2, 9, 7), None, None, i64(1, 2, 4, 3), mode='linear',
         label='linear_down'),
    case('Resize', _IMAGE, None, None, i64(1, 2, 7, 5), mode='linear',
         coordinate_transformation_mode='align_corners', label='linear_align'),
    case('Resize', _IMAGE, None, np.array([1, 1, 2, 0.5], dtype=np.float32), mode='linear',
         coordinate_transformation_mode='asymmetric', label='linear_asymmetric'),
    case('Resize', _IMAGE, None, None, i64(1, 2, 1, 9), mode='linear',
         coordinate_transformation_mode='pytorch_half_pixel', label='pytorch_half_pixel'),
    case('Resize', _IMAGE, None, np.array([1, 1, 1.5, 1.25], dtype=np.float32),
         mode='linear', coordinate_transformation_mode='half_pixel_symmetric', opset=19,
         label='half_pixel_symmetric'),
    case('Resize', _IMAGE, None, np.array([1, 1, 2, 1.5], dtype=np.float32), mode='cubic',
         label='cubic'),
    case('Resize', _IMAGE, None, np.array([1, 1, 1.5, 0.7], dtype=np.float32), mode='cubic',
         cubic_coeff_a=-0.5, exclude_outside=1, label='cubic_exclude_outside'),
    case('Resize', _IMAGE, None, None, i64(6, 9), axes=[2, 3], mode='linear',
         keep_aspect_ratio_policy='not_larger', opset=18, label='axes_not_larger'),
    case('Resize', _IMAGE, np.array([1, 1, 2, 2], dtype=np.float32), opset=10,
         label='opset10'),
]

CASES: List[OpCase] = [*_LINEAR, *_ELEMENTWISE, *_ACTIVATIONS, *_NORMS, *_POOLING,
                       *_INDEXING, *_SHAPE, *_REDUCTIONS, *_RESIZE]
