"""One forward pass that records the autograd graph and which module produced what.

The forward runs on *shadow* parameters and buffers swapped in for the model's own
(:func:`shadowed`): by default on the ``meta`` device (shapes only, no arithmetic, so tracing a
ResNet-152 costs no convolutions), and, if the model's code needs real values (``.item()``,
data-dependent control flow), again on detached aliases of the real tensors.  Either way
the model's own tensors, ``requires_grad`` flags, modes and attributes are never changed:
the session snapshots every module's ``__dict__`` and puts it back.
"""
import contextlib
import itertools
import operator
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..utils.errors import first_line
from ..utils.inputs import random_batch
from .literal_sizes import SizeWatch
from .meta_kernels import FastMetaOps

_NORM_STAT_BUFFERS = ('running_mean', 'running_var')


def default_example_inputs(model: nn.Module) -> torch.Tensor:
    """A random 1x3x224x224 image on the model's device, as mmrazor used.

    It is drawn from a generator of its own (seed 0), so tracing leaves torch's global
    random state as it was and is the same on every run.

    Raises:
        ValueError: ``model`` is a transformers model whose main input is no image
            (``main_input_name`` is not ``pixel_values``): an image would fail deep in
            its embedding with a dtype error that names neither the model nor the fix.

    Example:
        >>> default_example_inputs(nn.Conv2d(3, 4, 3)).shape
        torch.Size([1, 3, 224, 224])
    """
    main_input = getattr(model, 'main_input_name', 'pixel_values')
    if is_transformers_model(model) and main_input != 'pixel_values':
        raise ValueError(f'{type(model).__name__} reads {main_input!r}, not an image: pass '
                         f"example inputs (e.g. {{'{main_input}': torch.randint(0, "
                         "config.vocab_size, (1, 16))}); without them razorlib uses a "
                         '1x3x224x224 image')
    return random_batch(model, (3, 224, 224))


def is_transformers_model(module: nn.Module) -> bool:
    """Whether ``module`` is a transformers ``PreTrainedModel``, told by its classes'
    names so that transformers is never imported here.

    Example:
        >>> is_transformers_model(nn.Linear(2, 2))
        False
    """
    return any(cls.__name__ == 'PreTrainedModel' and cls.__module__.startswith('transformers.')
               for cls in type(module).__mro__)


@contextlib.contextmanager
def without_kv_cache(model: nn.Module) -> Iterator[None]:
    """Set ``config.use_cache = False`` on the transformers models in ``model`` for a while,
    unless the model is on the ``meta`` device.

    One forward of a trace, a check or a score never needs the key/value cache, and a
    cache returned as tuples of tensors (older transformers, models' own code) would make
    the keys and values outputs the caller may read, freezing the key/value heads.
    A model on ``meta`` keeps its cache: without one, transformers reads the position
    ids' values to find packed sequences (``.item()``), which meta tensors do not have.
    Transformers' ``Cache`` objects hold tensors that are not read as outputs, so the
    key/value heads prune with it on.

    Example:
        >>> class Config:
        ...     use_cache = True
        >>> class PreTrainedModel(nn.Module):  # stands in for transformers' own
        ...     pass
        >>> PreTrainedModel.__module__ = 'transformers.modeling_utils'
        >>> class Decoder(PreTrainedModel):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.config = Config()
        >>> decoder = Decoder()
        >>> with without_kv_cache(decoder):
        ...     decoder.config.use_cache
        False
        >>> decoder.config.use_cache
        True
    """
    if any(parameter.is_meta for parameter in model.parameters()):
        yield
        return
    saved = {}  # id -> (config, its use_cache); a config shared by nested models once
    for module in model.modules():
        config = vars(module).get('config')
        if getattr(config, 'use_cache', False) and is_transformers_model(module):
            saved[id(config)] = (config, config.use_cache)
    for config, _ in saved.values():
        config.use_cache = False
    try:
        yield
    finally:
        for config, use_cache in saved.values():
            config.use_cache = use_cache


def call_model(model: nn.Module, example_inputs: Any) -> Any:
    """Call ``model`` with a tensor, a tuple/list of positional args or a mapping of kwargs
    (a dict, a tokenizer's ``BatchEncoding``); transformers models on real weights run
    without their key/value cache (:func:`without_kv_cache`)."""
    with without_kv_cache(model):
        if isinstance(example_inputs, Mapping):
            return model(**example_inputs)
        if isinstance(example_inputs, (tuple, list)):
            return model(*example_inputs)
        return model(example_inputs)


def call_on_batch(model: nn.Module, inputs: Any, who: str, index: int) -> Any:
    """:func:`call_model` on batch ``index`` of the data ``who`` reads; an error in the
    forward is re-raised as a ``ValueError`` naming the batch and its input shapes: a
    size mismatch deep in a layer does not say that the data was at fault.

    Example:
        >>> call_on_batch(nn.Linear(3, 2), torch.zeros(4, 5), "importance 'taylor'", 0)
        Traceback (most recent call last):
        ...
        ValueError: importance 'taylor': the model fails on data batch 0 (inputs (4, 5)): ...
    """
    try:
        return call_model(model, inputs)
    except Exception as err:  # pylint: disable=broad-except  # re-raised, with the batch
        shapes = ', '.join(str(tuple(t.shape)) for t in flatten_tensors(inputs)) or \
            type(inputs).__name__
        raise ValueError(f'{who}: the model fails on data batch {index} (inputs {shapes}): '
                         f'{first_line(err, limit=None)}') from err


def flatten_tensors(obj: Any) -> List[torch.Tensor]:
    """Every tensor in a nested mapping/list/tuple, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in flatten_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in flatten_tensors(v)]
    return []


def to_meta(obj: Any) -> Any:
    """Tensors in a nested mapping/list/tuple moved to the ``meta`` device (a mapping
    becomes a dict)."""
    if isinstance(obj, torch.Tensor):
        return obj.to('meta')
    if isinstance(obj, Mapping):
        return {k: to_meta(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_meta(v) for v in obj)
    return obj


@dataclass
class ForwardRecord:
    """What one traced forward left behind.

    Args:
        outputs: the output tensors that depend on parameters.
        node_modules: grad_fn node -> names of the modules whose forward returned it.
        module_outputs: ``(node, output_nr, module name)`` of every module call.
        calls: module name -> number of calls.
        owners: ``id`` of each shadow tensor -> its ``(module name, attribute)``, in
            ``named_modules`` order (several for a tied weight).
        device: ``'meta'`` or ``'real'``: how the forward ran.
        shadows: the stand-in tensors the forward ran on, by parameter/buffer name; kept
            alive with the record so the ``id`` keys of ``owners`` stay unique.
        sizes: how the model's code sized its views and which sizes it read.
        created: the grad_fn of every tensor a torch call of the forward returned
            (:attr:`SizeWatch.created`), so ops whose results nothing uses are walked too.
        modules: every module of the model by name, each once (``named_modules()``).
        module_calls: one :class:`ModuleCall` per call of the watched modules.
    """
    outputs: List[torch.Tensor]
    node_modules: Dict[Any, List[str]] = field(default_factory=lambda: defaultdict(list))
    module_outputs: List[Tuple[Any, int, str]] = field(default_factory=list)
    calls: Dict[str, int] = field(default_factory=lambda: defaultdict(int))
    owners: Dict[int, List[Tuple[str, str]]] = field(default_factory=dict)
    device: str = 'meta'
    shadows: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    sizes: SizeWatch = field(default_factory=SizeWatch, repr=False)
    created: List[Any] = field(default_factory=list, repr=False)
    modules: Dict[str, nn.Module] = field(default_factory=dict, repr=False)
    module_calls: List['ModuleCall'] = field(default_factory=list, repr=False)


@dataclass
class ModuleCall:
    """One call of a module that is traced as a whole (:mod:`.composite`).

    Args:
        name: the module's name.
        input: ``(grad_fn, output_nr)`` of its first argument; None for a tensor
            without a graph (a model input).
        start: the autograd sequence number when the call began: the nodes its forward
            creates have larger ones.
        output: the grad_fn of the tensor it returned (None if not a tensor with one).
    """
    name: str
    input: Optional[Tuple[Any, int]]
    start: int
    output: Any = None


def _sequence_number() -> int:
    """The autograd sequence number of a node made now (a 0-d meta product)."""
    marker = torch.empty((), device='meta', requires_grad=True).mul(1)
    return marker.grad_fn._sequence_nr()


def _watch_calls(record: 'ForwardRecord', name: str, module: nn.Module) -> List[Any]:
    """Hooks filling :attr:`ForwardRecord.module_calls` for ``module``'s calls."""
    open_calls: List[ModuleCall] = []

    def before(module, args):
        with torch._C.DisableTorchFunction():  # not the model's code: SizeWatch skips it
            x = args[0] if args and isinstance(args[0], torch.Tensor) else None
            source = (x.grad_fn, x.output_nr) if x is not None and x.grad_fn else None
            open_calls.append(ModuleCall(name, source, _sequence_number()))

    def after(module, args, output):
        call = open_calls.pop()
        if isinstance(output, torch.Tensor) and output.output_nr == 0:
            call.output = output.grad_fn
        record.module_calls.append(call)

    return [module.register_forward_pre_hook(before), module.register_forward_hook(after)]


def all_modules(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``named_modules(remove_duplicate=False)``: every module under every name it has."""
    return list(model.named_modules(remove_duplicate=False))


def _named_tensors(modules: Sequence[Tuple[str, nn.Module]], table: str):
    for prefix, module in modules:
        for key, tensor in getattr(module, table).items():
            if tensor is not None:
                yield (f'{prefix}.{key}' if prefix else key), tensor


def shadow_tensors(model: nn.Module, meta: bool,
                   modules: Optional[Sequence[Tuple[str, nn.Module]]] = None
                   ) -> Dict[str, torch.Tensor]:
    """Stand-ins for every parameter and buffer, tied ones kept tied.

    Float tensors (but norm running statistics) require grad, so frozen layers and
    buffer arithmetic appear in the autograd graph.

    Args:
        modules: :func:`all_modules` of ``model`` if the caller has them already.
    """
    modules = all_modules(model) if modules is None else modules
    shadows: Dict[str, torch.Tensor] = {}
    made: Dict[int, torch.Tensor] = {}
    named = itertools.chain(_named_tensors(modules, '_parameters'),
                            _named_tensors(modules, '_buffers'))
    for name, tensor in named:
        shadow = made.get(id(tensor))
        if shadow is None:
            if not meta:
                shadow = tensor.detach()
            elif tensor.is_contiguous():  # empty_like costs ~10x more on meta
                shadow = torch.empty(tensor.shape, dtype=tensor.dtype, device='meta')
            else:
                shadow = torch.empty_like(tensor, device='meta')
            if tensor.is_floating_point() and name.rpartition('.')[2] not in _NORM_STAT_BUFFERS:
                shadow.requires_grad_(True)
            made[id(tensor)] = shadow
        shadows[name] = shadow
    return shadows


_CONTAINERS = (dict, list, set)


def _snapshot(module: nn.Module) -> Tuple[Dict[str, Any], List[Tuple[Any, Any]]]:
    """The module's attributes, and a copy of the contents of each plain dict/list/set
    among them (a cache that forward fills in place, or the parameter and buffer
    tables); an empty one is only recorded as empty."""
    attrs = vars(module).copy()
    contents = [(value, value.copy() if value else None) for value in attrs.values()
                if type(value) in _CONTAINERS]
    return attrs, contents


def _restore(module: nn.Module, saved: Tuple[Dict[str, Any], List[Tuple[Any, Any]]]) -> None:
    attrs, contents = saved
    current = vars(module)
    if current.keys() != attrs.keys() or any(map(operator.is_not, current.values(),
                                                 attrs.values())):
        current.clear()
        current.update(attrs)
    for value, copy in contents:
        if copy is None:
            if value:
                value.clear()
        elif type(value) is list:
            value[:] = copy
        elif type(value) is set or not _same_items(value, copy):
            value.clear()
            value.update(copy)


def _same_items(a: dict, b: dict) -> bool:
    """Dict equality by identity of the values (tensors do not compare to a bool)."""
    return len(a) == len(b) and all(b.get(k, b) is v for k, v in a.items())


@contextlib.contextmanager
def shadowed(model: nn.Module, shadows: Dict[str, torch.Tensor],
             modules: Optional[Sequence[Tuple[str, nn.Module]]] = None) -> Iterator[None]:
    """Put ``shadows`` in place of the model's parameters and buffers for a while.

    Inside, anything may change the modules (their tensors, attributes, caches, modes):
    on exit every module's ``__dict__`` and parameter/buffer tables are put back as they
    were, so the real tensors are never touched.  Cheaper than ``functional_call`` or a
    deep copy, which is what makes shape-only forwards of large models fast.

    Args:
        modules: :func:`all_modules` of ``model`` if the caller has them already.

    Example:
        >>> conv = nn.Conv2d(3, 8, 3)
        >>> with shadowed(conv, shadow_tensors(conv, meta=True)):
        ...     conv.weight.device.type
        'meta'
        >>> conv.weight.device.type
        'cpu'
    """
    by_name = dict(all_modules(model) if modules is None else modules)
    snapshot = {module: _snapshot(module) for module in by_name.values()}
    try:
        for name, tensor in shadows.items():
            owner, _, attr = name.rpartition('.')
            module = by_name[owner]
            table = module._parameters if attr in module._parameters else module._buffers
            table[attr] = tensor
        yield
    finally:
        for module, saved in snapshot.items():
            _restore(module, saved)


def _run(model: nn.Module, example_inputs: Any, meta: bool,
         modules: Sequence[Tuple[str, nn.Module]], watch: Sequence[str]) -> ForwardRecord:
    shadows = shadow_tensors(model, meta, modules)
    distinct: Dict[int, Tuple[str, nn.Module]] = {}
    for name, module in modules:
        distinct.setdefault(id(module), (name, module))
    record = ForwardRecord([], device='meta' if meta else 'real', shadows=shadows,
                           modules=dict(distinct.values()))
    for name, tensor in shadows.items():
        owner, _, attr = name.rpartition('.')
        record.owners.setdefault(id(tensor), []).append((owner, attr))

    def hook_for(name: str):
        def hook(module, args, output):
            record.calls[name] += 1
            with torch._C.DisableTorchFunction():  # not the model's code: SizeWatch skips it
                for tensor in flatten_tensors(output):
                    if tensor.grad_fn is not None:
                        record.node_modules[tensor.grad_fn].append(name)
                        record.module_outputs.append((tensor.grad_fn, tensor.output_nr, name))
        return hook

    handles = [m.register_forward_hook(hook_for(name)) for name, m in record.modules.items()]
    for name in watch:
        handles += _watch_calls(record, name, record.modules[name])
    try:
        with shadowed(model, shadows, modules):
            model.eval()
            inputs = to_meta(example_inputs) if meta else example_inputs
            with torch.enable_grad(), record.sizes, \
                    (FastMetaOps() if meta else contextlib.nullcontext()):
                outputs = call_model(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    record.created = record.sizes.created
    tensors = flatten_tensors(outputs)
    record.sizes.note_outputs(tensors)
    record.outputs = [t for t in tensors if t.requires_grad and t.is_floating_point()]
    return record


def record_forward(model: nn.Module, example_inputs: Any, meta: bool = True,
                   modules: Optional[Sequence[Tuple[str, nn.Module]]] = None,
                   watch: Sequence[str] = ()) -> ForwardRecord:
    """Run ``model`` once on shadow tensors and record its autograd graph.

    With ``meta`` the ``meta`` device is tried first; a model that needs real values
    runs again on aliases of its real tensors.

    Args:
        modules: :func:`all_modules` of ``model`` if the caller has them already.
        watch: names of modules whose calls to record (:attr:`ForwardRecord.module_calls`).

    Raises:
        RuntimeError: the model's weights are on ``meta`` and its code needs real values,
            so there is nothing to run it on; the model's own error is the cause.
    """
    modules = all_modules(model) if modules is None else modules
    if meta:
        try:
            return _run(model, example_inputs, True, modules, watch)
        except Exception as err:  # the model's code needs real values: run it for real
            if any(parameter.is_meta for parameter in model.parameters()):
                raise RuntimeError(
                    f'{type(model).__name__}: its forward fails on the meta device '
                    f'({type(err).__name__}: {err}), and its weights are on meta, so '
                    'it cannot run on real values either; load real weights, or '
                    'give inputs that take a shape-only path') from err
    return _run(model, example_inputs, False, modules, watch)
