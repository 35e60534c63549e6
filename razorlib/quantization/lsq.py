"""LSQ: a calibrated graph as a trainable module, fake-quantized with learned scales.

Esser et al., *Learned Step Size Quantization* (2020), as in mmrazor's LSQ fake quantize:
``x_q = (clamp(round(x / s) + z, q_min, q_max) - z) * s`` with the straight-through
gradient for ``round`` and the gradient of ``s`` scaled by ``1 / sqrt(n q_max)`` (``n``:
the elements one scale covers).  :class:`LSQGraph` makes the graph's float parameters
(weights, biases) and the logarithm of one scale per dominance set of its configs
``nn.Parameter``\\ s, starting from the PTQ values (in log space a step of Adam, whose
steps are about its learning rate whatever the gradient, moves a scale by a fraction of
itself; until a log scale moves, its scale is the calibrated one exactly, not
``exp(log(s))``, so the untrained module computes what the PTQ graph does, bit for bit,
whatever the rounding), and runs the graph with the rules of
:class:`~razorlib.quantization.QuantExecutor` (the same tensors quantized at the same
places, a passive bias at input scale x weight scale), only differentiably.  Zero points
stay as calibrated.  :meth:`LSQGraph.calibrated_graph` writes the learned values into a
copy of the graph, which ``QuantExecutor`` runs and ``export_graph`` exports like any
PTQ graph.

A checkpoint (``state_dict``) holds, besides the weights and log scales, the
quantization signature as buffers: ``quant_signature.platforms`` (the platforms, a bit
mask), ``quant_signature.int32_biases`` (one flag per parameter of ``weights``: quantized
as an int32 bias, PASSIVE, or not; calibration leaves a bias FP32 where its integers would
overflow), ``quant_signature.<scale>`` (the integer range, bits, policy, rounding and
channel axis of that scale's config) and ``zero_points.<scale>``; and
``initial_scales.<scale>``, the scale each log scale started from (exactly, see above; a
checkpoint saved without them keeps this graph's).  Loading it into a graph
quantized otherwise (another platform, integer range or policy, a bias int32 in one and
FP32 in the other) raises naming the scale or bias and what differs, before any tensor is
loaded; the zero points come from the checkpoint, not from this graph's calibration.  A
signature of version 1 lacks ``int32_biases``: it loads where this graph has no bias that
calibration could make either (TRT_INT8's biases are always FP32), and is refused
otherwise (ORT_INT8), the message saying how to record the biases' state by hand.  A
checkpoint saved before the signature existed loads
unchecked, with a warning saying so; the signature's keys are declared optional
(``LSQGraph.OPTIONAL_STATE_PREFIXES``), so tools that check a checkpoint's keys before
loading it (``check_fits``: ``tools/deploy.py``) let such a checkpoint through to that
warning.
"""
import re
from typing import Any, Dict, List, Mapping, Optional, Union

import torch
import torch.nn as nn

from ..engine.optional_state import keep_own_optional_state
from ..ir import (BaseGraph, Operation, QuantableOperation, QuantizationProperty,
                  RoundingPolicy, TensorQuantizationConfig, TorchExecutor)
from ..utils.caller import warn_at_caller
from .executor import QuantExecutor, quantized_inputs
from .functional import ROUNDING_FUNCTIONS
from .observers import MIN_SCALE
from .platform import TargetPlatform, as_platform
from .state import (check_calibrated, check_not_dequantized, listed_names,
                    quantable_operations)

__all__ = ['LSQGraph', 'follow_passive_scales', 'lsq_fake_quantize']


def lsq_fake_quantize(tensor: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                      quant_min: int, quant_max: int, grad_factor: float = 1.0,
                      rounding: RoundingPolicy = RoundingPolicy.ROUND_HALF_EVEN
                      ) -> torch.Tensor:
    """Quantize-dequantize with a learnable ``scale`` (LSQ's gradients).

    The forward is :func:`~razorlib.quantization.linear_fake_quantize` (with ``rounding``,
    half to even by default: a config's own rounding, so LSQ computes what
    ``QuantExecutor`` does); backward, the rounding passes the gradient straight through,
    values clipped to the range get none, and ``scale`` gets LSQ's gradient times
    ``grad_factor``.

    Args:
        tensor: the values.
        scale: the step, shaped to broadcast against ``tensor``.
        offset: the zero point, shaped like ``scale``.
        quant_min: the smallest integer.
        quant_max: the largest integer.
        grad_factor: multiplies the scale's gradient (LSQ: ``1 / sqrt(n quant_max)``).
        rounding: how ``tensor / scale`` is rounded to integers.

    Returns:
        The fake-quantized tensor.

    Example:
        >>> x = torch.tensor([0.26, -0.14, 30.0], requires_grad=True)
        >>> s = torch.tensor(0.1, requires_grad=True)
        >>> y = lsq_fake_quantize(x, s, torch.tensor(0.), -128, 127)
        >>> y.sum().backward()
        >>> y.detach(), x.grad, round(float(s.grad), 2)  # ds: (3 - 2.6) + (-1 + 1.4) + 127
        (tensor([ 0.3000, -0.1000, 12.7000]), tensor([1., 1., 0.]), 127.8)
    """
    scale = scale * grad_factor + (scale - scale * grad_factor).detach()
    scaled = tensor / scale
    rounded = scaled + (ROUNDING_FUNCTIONS[RoundingPolicy(rounding)](scaled) - scaled).detach()
    return ((rounded + offset).clamp(quant_min, quant_max) - offset) * scale


def _exact_exp(log_scale: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
    """``exp(log_scale)``, and exactly ``initial`` wherever ``log_scale`` is still
    ``log(initial)``; the gradient is that of ``exp`` everywhere.

    ``exp(log(s))`` is not ``s`` in float32 for most scales: an untrained LSQGraph would
    otherwise quantize with scales an ulp off the calibrated ones, a step off PTQ's output
    wherever a value lies on a floor or ceiling boundary (``ROUND_DOWN``, ``ROUND_UP``).
    ``initial - exp(log_scale)`` is exact (the two are within a factor of 2), so adding it
    back gives ``initial`` bit for bit.
    """
    scale = log_scale.exp()
    untrained = log_scale.detach() == initial.log()
    return scale + torch.where(untrained, initial - scale.detach(), torch.zeros_like(scale))


def _key(name: str, taken: Dict[str, object]) -> str:
    key = re.sub(r'\W', '_', name) or '_'
    base, count = key, 1
    while key in taken:
        key, count = f'{base}_{count}', count + 1
    return key


class _LSQExecutor(QuantExecutor):
    """Runs the graph of an :class:`LSQGraph` with its learned scales, with gradients."""

    def __init__(self, graph: BaseGraph, owner: 'LSQGraph', device) -> None:
        super().__init__(graph, device, warn_uncalibrated=False)  # LSQGraph warned
        self.owner = owner

    def run_operation(self, op: Operation, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        with torch.enable_grad():
            if not isinstance(op, QuantableOperation):
                return TorchExecutor.run_operation(self, op, inputs)
            inputs = list(inputs)
            for index in quantized_inputs(op):
                inputs[index] = self.owner.fake_quantize(op, op.input_quant_config[index],
                                                         inputs[index])
            outputs = TorchExecutor.run_operation(self, op, inputs)
            return [self.owner.fake_quantize(op, config, tensor) if config.state.is_quantized
                    else tensor for config, tensor in zip(op.output_quant_config, outputs)]


def _reread_constants(lsq: 'LSQGraph', incompatible_keys) -> None:
    """After a checkpoint loads: a new executor, which reads the constant operands it
    decodes once (a Clip's bounds, which ``ActivationCentering`` moves) from the loaded
    weights; the old one would go on with those the graph was built with.  It is built
    where the weights are now (``to()`` moves them, not the executor), so the graph's
    variables stay the module's parameters."""
    device = next((weight.device for weight in lsq.weights.values()), lsq._executor.device)
    lsq._executor = _LSQExecutor(lsq._graph, lsq, device)


class LSQGraph(nn.Module):
    """A calibrated graph whose weights and scales train by backpropagation (LSQ).

    The graph's float parameters become this module's ``weights`` (the graph's variables
    then hold those very tensors), and the logarithm of each calibrated scale (one per
    dominance set, not the passive ones) a parameter of ``scales``; a checkpoint of the
    module restores both, and also carries the quantization signature (see the module):
    loading one of a graph quantized otherwise raises, and the zero points are the
    checkpoint's.  Keep the graph for this module alone: its variables hold trainable
    tensors, and the fp32 values PTQ passes kept aside in it are dropped (LSQ trains the
    values in use; they were a second copy of the weights): ``LSQGraph(graph.copy(
    copy_value=True))`` keeps ``graph`` the PTQ model.

    Args:
        graph: a calibrated graph (from ``quantize_torch_model``), taken over; not baked
            and with no operation left dequantized.
        device: where to run it.

    Raises:
        ValueError: ``graph`` has baked parameters (``bake_parameters``: LSQ would quantize
            their quantized values again with the learned scales, while the calibrated
            graph reads them as they are) or operations left dequantized (they would
            train in floating point); the message names the operations.

    Example:
        >>> from razorlib.quantization import QuantExecutor, quantize_torch_model
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
        ...                           torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
        >>> batches = [torch.randn(8, 3, 8, 8) for _ in range(2)]
        >>> lsq = LSQGraph(quantize_torch_model(net, batches, batches[0], progress=False))
        >>> sorted(lsq.scales)[:2], len(lsq.weights)
        (['node_conv2d_in0', 'node_conv2d_in1'], 4)
        >>> loss = lsq(batches[0]).square().mean()
        >>> loss.backward()
        >>> all(p.grad is not None for p in lsq.scales.values())
        True
        >>> plain = lsq.calibrated_graph()  # a PTQ graph again, with the learned values
        >>> torch.equal(QuantExecutor(plain)(batches[1])[0], lsq(batches[1]).detach())
        True

        A checkpoint loads only into a graph quantized the same way:

        >>> other = LSQGraph(quantize_torch_model(net, batches, batches[0], 'ORT_INT8',
        ...                                       progress=False))
        >>> other.load_state_dict(lsq.state_dict())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: LSQGraph checkpoint: quantized for TRT_INT8, this graph for ORT_INT8; ...
    """

    #: What a checkpoint saved before the quantization signature lacks (see the module
    #: docstring): ``check_fits`` lets these keys be missing.
    OPTIONAL_STATE_PREFIXES = ('quant_signature.', 'zero_points.', 'initial_scales.')

    def __init__(self, graph: BaseGraph, device: Union[str, torch.device] = 'cpu') -> None:
        check_calibrated(graph, 'LSQGraph')
        check_not_dequantized(graph, 'LSQGraph')
        _refuse_baked(graph)
        super().__init__()
        self.weights = nn.ParameterDict()
        self.scales = nn.ParameterDict()
        self.initial_scales = nn.Module()
        self._graph = graph
        self._variables: Dict[str, str] = {}
        for var in graph.variables.values():
            if (var.is_parameter and var.value is not None and var.value.is_floating_point()
                    and var.dest_ops):
                key = _key(var.name, self.weights)
                self.weights[key] = nn.Parameter(var.value.detach().clone())
                var.value = self.weights[key]
                self._variables[key] = var.name
        _forget_values_kept_aside(graph)
        self._roots: Dict[TensorQuantizationConfig, str] = {}
        self._factors: Dict[TensorQuantizationConfig, float] = {}
        for op in quantable_operations(graph):
            for side, configs, variables in (('in', op.input_quant_config, op.inputs),
                                             ('out', op.output_quant_config, op.outputs)):
                for index, (config, var) in enumerate(zip(configs, variables)):
                    self._add_scale(config, var, f'{op.name}_{side}{index}')
        self._executor = _LSQExecutor(graph, self, device)
        self._register_signature()
        self.register_load_state_dict_post_hook(_reread_constants)

    def _add_scale(self, config: TensorQuantizationConfig, var, name: str) -> None:
        root = config.dominated_by
        if not config.state.is_quantized or config.state.is_passive or root in self._roots:
            return
        key = _key(name, self.scales)
        initial = root.scale.detach().float().clone()
        self.initial_scales.register_buffer(key, initial)
        self.scales[key] = nn.Parameter(initial.log())
        self._roots[root] = key
        per_scale = max(_numel(var) // max(root.scale.numel(), 1), 1)
        self._factors[root] = (per_scale * config.quant_max) ** -0.5

    def scale_of(self, op: QuantableOperation, config: TensorQuantizationConfig) -> torch.Tensor:
        """The learned scale of ``config`` (of ``op``); a passive bias's is derived."""
        if config.state.is_passive:
            return (self.scale_of(op, op.input_quant_config[0])
                    * self.scale_of(op, config.master_by))
        key = self._roots[config.dominated_by]
        return _exact_exp(self.scales[key], getattr(self.initial_scales, key)).clamp_min(MIN_SCALE)

    def fake_quantize(self, op: QuantableOperation, config: TensorQuantizationConfig,
                      tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` through LSQ with the learned scale of ``config``."""
        scale = self.scale_of(op, config).to(tensor)
        offset = config.offset
        offset = torch.zeros_like(scale) if offset is None else offset.to(tensor).expand_as(scale)
        if QuantizationProperty.PER_CHANNEL in config.policy:
            shape = [1] * tensor.dim()
            shape[config.channel_axis] = -1
            scale, offset = scale.reshape(shape), offset.reshape(shape)
        return lsq_fake_quantize(tensor, scale, offset, config.quant_min, config.quant_max,
                                 self._factors.get(config.dominated_by, 1.0), config.rounding)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The graph's first output on ``inputs`` (in graph input order), differentiable."""
        self._check_float32('LSQGraph.forward')
        return self._executor(list(inputs))[0]

    def _check_float32(self, action: str) -> None:
        """Refuse to run or export after ``.half()``, ``.bfloat16()``, ``.double()`` or
        ``.to(dtype)``: the graph computes in float32 only (``check_float32``), and a
        converted module would fail with bare errors (a float32 scale against a float16
        bias, int32 bias integers beyond float16) or export an invalid model.  The
        conversion itself is not refused here (``.float()`` undoes a ``.double()``
        exactly); ``QAT`` refuses it before converting anything."""
        dtypes = sorted({str(p.dtype) for p in self.parameters() if p.dtype != torch.float32})
        if dtypes:
            raise TypeError(f'{action}: its parameters were converted to {", ".join(dtypes)} '
                            '(.half(), .bfloat16(), .double() or .to(dtype)), but it computes '
                            'in float32 only, as its calibrated graph does: convert it back '
                            'with .float() after .double(), or build it again from the float32 '
                            'graph after a half precision one (.float() keeps its weights and '
                            'scales rounded to half precision)')

    def _apply(self, fn, recurse: bool = True):
        module = super()._apply(fn, recurse)
        for key, name in self._variables.items():  # the graph reads the moved tensors
            self._graph.variables[name].value = self.weights[key]
        return module

    def _platforms(self) -> List[TargetPlatform]:
        return sorted({as_platform(op.platform) for op in quantable_operations(self._graph)},
                      key=list(TargetPlatform).index)

    def _register_signature(self) -> None:
        """The buffers a checkpoint carries to be checked (see the module)."""
        self.quant_signature = nn.Module()
        self.zero_points = nn.Module()
        self.quant_signature.register_buffer('version', torch.tensor(SIGNATURE_VERSION))
        self.quant_signature.register_buffer('platforms', torch.tensor(
            sum(1 << list(TargetPlatform).index(platform) for platform in self._platforms())))
        self.quant_signature.register_buffer('int32_biases', self._int32_biases())
        for root, key in self._roots.items():
            self.quant_signature.register_buffer(key, _signature(root))
            self.zero_points.register_buffer(key, _zero_point(root))

    def _int32_biases(self) -> torch.Tensor:
        """One flag per parameter of ``weights``, in order: whether it is quantized as an
        integer bias (PASSIVE).  Calibration decides it per graph (a bias whose integers
        would overflow stays FP32), and no learned scale records it."""
        passive = {var.name for op in quantable_operations(self._graph)
                   for config, var in zip(op.input_quant_config, op.inputs)
                   if config.state.is_passive}
        return torch.tensor([name in passive for name in self._variables.values()],
                            dtype=torch.bool)

    def _bias_candidates(self) -> List[str]:
        """The parameters calibration may quantize as integer biases or leave FP32: those
        read through a config with a ``master_by`` (its weight config)."""
        return [var.name for op in quantable_operations(self._graph)
                for config, var in zip(op.input_quant_config, op.inputs)
                if var.is_parameter and config.master_by is not None]

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        for root, key in self._roots.items():  # the zero points in use (children save later)
            getattr(self.zero_points, key).copy_(_zero_point(root))
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False):
        """``nn.Module.load_state_dict``, but a checkpoint that does not fit leaves this
        graph as it was: torch raises a size mismatch or a missing key only after copying
        every tensor that fits, and the signature check has set the zero points it read by
        then, which would leave a model half of this graph and half of another.  (Inside a
        larger module the QAT algorithm's ``check_fits`` refuses such a checkpoint first.)
        """
        kept = {key: value.detach().clone() for key, value in self.state_dict().items()}
        zero_points = {root: root.offset for root in self._roots}
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except Exception:
            super().load_state_dict(kept, assign=assign)
            for root, offset in zero_points.items():
                root.offset = offset
            raise

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        """Check the checkpoint's signature before any tensor loads; take its zero points;
        keep this graph's own signature, zero points and initial scales where an older
        checkpoint lacks them (after the check, which tells an older checkpoint by its
        missing signature)."""
        if self._roots and prefix + 'quant_signature.version' not in state_dict:
            warn_at_caller(f'LSQGraph checkpoint: no {prefix}quant_signature: it predates the '
                           'quantization signature (platform, integer ranges, zero points) '
                           'that LSQGraph saves, so it is loaded unchecked, with the zero points '
                           'of this graph; save it again to add the signature')
        else:
            self._check_signature(state_dict, prefix)
        keep_own_optional_state(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def _check_signature(self, state_dict: Mapping[str, Any], prefix: str) -> None:
        """Raise ValueError naming what differs; then set the checkpoint's zero points."""
        version = state_dict.get(prefix + 'quant_signature.version')
        if version is not None and not 1 <= int(version) <= SIGNATURE_VERSION:
            raise ValueError(f'LSQGraph checkpoint: quantization signature version '
                             f'{int(version)}, this razorlib reads 1 to {SIGNATURE_VERSION}')
        platforms = state_dict.get(prefix + 'quant_signature.platforms')
        here = self.quant_signature.platforms
        if platforms is not None and int(platforms) != int(here):
            raise ValueError(f'LSQGraph checkpoint: quantized for {_platform_names(platforms)}, '
                             f'this graph for {_platform_names(here)}; build the QAT with the '
                             'platform it was trained with')
        if version is not None:
            self._check_int32_biases(state_dict, prefix)
        zero_points = {}
        for root, key in self._roots.items():
            saved = state_dict.get(f'{prefix}quant_signature.{key}')
            ours = getattr(self.quant_signature, key)
            if saved is None or tuple(saved.shape) != tuple(ours.shape):
                continue  # a scale of another graph: reported as a missing key
            differ = [f'{field} {_field(field, int(theirs))} in the checkpoint, '
                      f'{_field(field, int(mine))} here'
                      for field, theirs, mine in zip(_SIGNATURE_FIELDS, saved, ours)
                      if int(theirs) != int(mine)]
            if differ:
                raise ValueError(f'LSQGraph checkpoint: scale {key!r} is quantized otherwise: '
                                 f'{", ".join(differ)}; build the QAT with the quantization '
                                 'settings it was trained with')
            zero_point = state_dict.get(f'{prefix}zero_points.{key}')
            if zero_point is not None and zero_point.shape == _zero_point(root).shape:
                zero_points[root] = zero_point
        for root, zero_point in zero_points.items():
            if root.offset is not None or bool(zero_point.any()):
                dtype = torch.float32 if root.offset is None else root.offset.dtype
                root.offset = zero_point.detach().to(root.scale.device, dtype, copy=True)

    def _check_int32_biases(self, state_dict: Mapping[str, Any], prefix: str) -> None:
        """Raise ValueError naming a bias that is an integer (PASSIVE) in the checkpoint and
        FP32 here, or the other way round; or, for a checkpoint that predates that record
        (signature version 1), when this graph has biases that could be either."""
        saved = state_dict.get(prefix + 'quant_signature.int32_biases')
        if saved is None:
            self._refuse_unrecorded_biases(prefix)
            # no bias of this graph can be int32: this graph's flags are the checkpoint's
            state_dict[prefix + 'quant_signature.int32_biases'] = (
                self.quant_signature.int32_biases.clone())
            return
        names = [key[len(prefix + 'weights.'):] for key in state_dict
                 if key.startswith(prefix + 'weights.')]
        if len(names) != saved.numel():
            raise ValueError(f'LSQGraph checkpoint: {prefix}quant_signature.int32_biases has '
                             f'{saved.numel()} flags for its {len(names)} weights; the '
                             'checkpoint is damaged')
        theirs = dict(zip(names, saved.tolist()))
        for key, mine in zip(self._variables, self.quant_signature.int32_biases.tolist()):
            if key in theirs and bool(theirs[key]) != mine:
                name = self._variables[key]
                readers = [op.name for op in self._graph.variables[name].dest_ops]
                raise ValueError(f'LSQGraph checkpoint: bias {name!r} (of {readers}) is '
                                 f'{_bias_state(theirs[key])} in the checkpoint, '
                                 f'{_bias_state(mine)} here (calibration leaves a bias FP32 '
                                 'when its integers would overflow at input x weight scale); '
                                 'build the QAT with the calibration data it was trained with')

    def _refuse_unrecorded_biases(self, prefix: str) -> None:
        """A signature of version 1 does not say which biases were integers: unambiguous
        only where this graph has no bias calibration could make either (TRT_INT8)."""
        candidates = self._bias_candidates()
        if candidates:
            raise ValueError('LSQGraph checkpoint: its quantization signature (version 1) '
                             'does not record which biases are int32 (PASSIVE) and which FP32, '
                             f'and this graph\'s biases ({listed_names(candidates)}) can be '
                             'either (calibration leaves one FP32 when its integers would '
                             'overflow): it could load quantized otherwise than it was '
                             'trained.  If its graph quantized them as this one does, record '
                             'that and load it: '
                             f"state_dict['{prefix}quant_signature.int32_biases'] = "
                             '<this LSQGraph>.quant_signature.int32_biases.clone()')

    def calibrated_graph(self) -> BaseGraph:
        """A copy of the graph holding the learned weights and scales, detached.

        It is a calibrated graph like any from ``quantize_torch_model``: run it with
        ``QuantExecutor``, analyse it, export it with ``export_graph``.  Its FP32 model
        (``dequantize_graph``, ``analyse_error``'s reference, the plain ``ONNX`` export,
        ``tools/deploy.py``'s FP32) is the trained float model: the learned weights and
        biases, unquantized: the fp32 values PTQ passes had kept aside (the biases
        before ``BiasCorrection``, the weights before ``AdaRound``'s rounding), those of
        the model before QAT, were dropped when this module took the graph over.  The
        copy holds one copy of the parameters, its own: training goes on without
        changing it.

        Raises:
            TypeError: the module was converted to another dtype than float32 (see
                :meth:`forward`'s check): its graph would export an invalid model.
        """
        self._check_float32('LSQGraph.calibrated_graph')
        with torch.no_grad():
            for root, key in self._roots.items():
                root.scale = _exact_exp(self.scales[key], getattr(self.initial_scales, key)
                                        ).clamp_min(MIN_SCALE)
        return follow_passive_scales(self._graph.copy(copy_value=True))


def follow_passive_scales(graph: BaseGraph) -> BaseGraph:
    """Give every passive config (a bias) input scale x weight scale again, in place.

    Whatever changes activation or weight scales after calibration (LSQ, a PTQ pass that
    learns scales) calls it, so biases are quantized as the exporters assume.

    Example:
        >>> from razorlib.quantization import quantize_torch_model
        >>> x = torch.randn(2, 3, 8, 8)
        >>> graph = quantize_torch_model(torch.nn.Conv2d(3, 4, 3), [x], x, 'ORT_INT8',
        ...                              progress=False)  # int32 biases (TensorRT's are float)
        >>> data, weight, bias = graph.operations['node_conv2d'].input_quant_config
        >>> data.scale = data.scale * 2
        >>> torch.allclose(follow_passive_scales(graph).operations['node_conv2d']
        ...                .input_quant_config[2].scale, data.scale * weight.scale)
        True
    """
    for op in quantable_operations(graph):
        for config in op.input_quant_config:
            if config.state.is_passive and config.master_by is not None:
                config.scale = op.input_quant_config[0].scale * config.master_by.scale
    return graph


SIGNATURE_VERSION = 2
"""The layout of an :class:`LSQGraph` checkpoint's ``quant_signature`` buffers (2:
``int32_biases`` added; version 1 lacks it)."""

#: What each ``quant_signature.<scale>`` buffer holds, in order.
_SIGNATURE_FIELDS = ('quant_min', 'quant_max', 'num_of_bits', 'policy', 'rounding',
                     'channel_axis')


def _signature(config: TensorQuantizationConfig) -> torch.Tensor:
    """What a checkpoint's scale must match, as integers (see :data:`_SIGNATURE_FIELDS`)."""
    axis = -1 if config.channel_axis is None else config.channel_axis
    return torch.tensor([config.quant_min, config.quant_max, config.num_of_bits,
                         config.policy.value, list(RoundingPolicy).index(config.rounding), axis],
                        dtype=torch.int64)


def _field(field: str, value: int) -> str:
    """A signature value as its config shows it."""
    if field == 'policy':
        return '|'.join(flag.name for flag in QuantizationProperty if flag.value & value)
    if field == 'rounding':
        return list(RoundingPolicy)[value].name
    if field == 'channel_axis' and value < 0:
        return 'None'
    return str(value)


def _platform_names(mask: torch.Tensor) -> str:
    return '+'.join(platform.name for index, platform in enumerate(TargetPlatform)
                    if int(mask) >> index & 1) or 'no platform'


def _zero_point(config: TensorQuantizationConfig) -> torch.Tensor:
    """The config's zero point (zeros like its scale when it has none), float, detached."""
    scale = config.scale.detach().float()
    if config.offset is None:
        return torch.zeros_like(scale)
    return torch.broadcast_to(config.offset.detach().to(scale), scale.shape).clone()


def _bias_state(passive: bool) -> str:
    return 'int32 (PASSIVE)' if passive else 'FP32'


def _forget_values_kept_aside(graph: BaseGraph) -> None:
    """Drop the fp32 values PTQ passes kept aside (``set_parameter_value``: the weights
    before AdaRound, the biases before BiasCorrection), a copy of those parameters that
    LSQ never reads: it trains the values in use, and the FP32 model of its graph is the
    trained one (see ``calibrated_graph``).  They held a second copy of the model's
    weights for the life of the module."""
    for op in quantable_operations(graph):
        op.adopt_parameter_values()


def _refuse_baked(graph: BaseGraph) -> None:
    """Refuse a graph whose parameters ``bake_parameters`` replaced by their quantized
    values: LSQ would quantize them again with the learned scales, while the calibrated
    graph (and ``QuantExecutor``) reads a baked value as it is, so the two would compute
    different models once the weights train."""
    baked = [op.name for op in quantable_operations(graph)
             if any(config.state.is_baked for config in op.input_quant_config)]
    if baked:
        raise ValueError(f'LSQGraph: graph {graph.name!r} has baked parameters '
                         f'(bake_parameters; ops {listed_names(baked)}); LSQ trains the fp32 '
                         'values: build LSQGraph from the graph before baking, and bake its '
                         'calibrated_graph() if needed')


def _numel(var) -> Optional[int]:
    """Elements of one sample of ``var`` (its value, or its known shape past axis 0)."""
    if var.value is not None:
        return var.value.numel()
    shape = var.shape or ()
    known = [size for size in shape[1:] if isinstance(size, int)]
    count = 1
    for size in known:
        count *= size
    return count
