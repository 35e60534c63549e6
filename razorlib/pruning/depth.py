"""Depth pruning: remove whole residual blocks, the ones that change their input least.

A *block* is a module held in an ``nn.Sequential`` or ``nn.ModuleList`` whose output is
its input plus something (an identity shortcut: a ResNet block after the first of its
stage, a transformer layer), so removing it leaves a model that still runs.  Blocks are
ranked on calibration batches by one of:

- ``'cosine'``: ``1 - cos(input, output)`` per token / position, averaged (ShortGPT's
  block influence): a block whose output points where its input did adds little;
- ``'loss'``: how much the loss grows when the block is skipped (its output replaced
  by its input).

The least important ``num`` blocks (or ``ratio`` of them) go.  For Hugging Face decoder
stacks, :mod:`razorlib.integrations.transformers` also rewrites the config's layer
count and the layers' ``layer_idx``.
"""
import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..tracing.forward import call_model
from ..utils.modes import evaluating

__all__ = ['DepthPruned', 'residual_blocks', 'block_importance', 'select_blocks',
           'remove_blocks', 'prune_depth']

LossFn = Callable[[nn.Module, Any], torch.Tensor]
_CONTAINERS = (nn.Sequential, nn.ModuleList)


@dataclass
class DepthPruned:
    """The result of :func:`prune_depth`.

    Args:
        model: the model without the removed blocks (a copy).
        removed: their names in the original model; ``remove_blocks(fresh, removed)``
            repeats the cut on a freshly built model before loading the weights.
        importance: every candidate block's importance (higher is kept first).
    """
    model: nn.Module
    removed: List[str]
    importance: Dict[str, float] = field(default_factory=dict)


def _first_tensor(args: Tuple, kwargs: Dict[str, Any]) -> Optional[torch.Tensor]:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    value = kwargs.get('hidden_states')
    return value if isinstance(value, torch.Tensor) else None


def _main_output(output: Any) -> Optional[torch.Tensor]:
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    return output if isinstance(output, torch.Tensor) else None


def _with_main_output(output: Any, value: torch.Tensor) -> Any:
    if isinstance(output, (tuple, list)):
        return type(output)([value, *output[1:]])
    return value


def _candidates(model: nn.Module) -> Iterator[Tuple[str, nn.Module]]:
    """Composite modules (with children and parameters) held in a Sequential/ModuleList."""
    for name, container in model.named_modules():
        if not isinstance(container, _CONTAINERS):
            continue
        for index, block in container.named_children():
            if next(block.children(), None) is not None and \
                    next(block.parameters(), None) is not None:
                yield f'{name}.{index}' if name else index, block


def _adds_input(output: torch.Tensor, leaf: torch.Tensor) -> bool:
    """Whether ``output`` is ``leaf`` plus something: going back from ``output`` along the
    residual stream (through additions and ops of one activation input, such as a ReLU
    or a norm after the sum), some addition takes ``leaf`` itself.  An addition of the
    input inside a branch (``mlp(x + pos)``, ``conv(x + pos)``) is no shortcut: the
    stream ends at the branch's weight layer (:data:`_WEIGHT_LAYERS`)."""
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        children = [child for child, _ in node.next_functions if child is not None]
        if node.name() == 'AddBackward0':
            if any(getattr(child, 'variable', None) is leaf for child in children):
                return True
            stack.extend(children)
            continue
        activations = [child for child in children if not _is_parameter(child, leaf)]
        if len(activations) == 1 and not node.name().startswith(_WEIGHT_LAYERS):
            stack.append(activations[0])
    return False


#: Autograd nodes of weight layers: where a block's residual stream cannot run through
#: (a conv's weight is a leaf beside its one activation input, as a norm's is).
_WEIGHT_LAYERS = ('Convolution', 'Addmm', 'Mm', 'Bmm', 'Baddbmm', 'Linear', 'Embedding')


def _is_parameter(node: Any, leaf: torch.Tensor) -> bool:
    """Whether an autograd node is a leaf other than the block's input (a parameter)."""
    variable = getattr(node, 'variable', None)
    return variable is not None and variable is not leaf


def residual_blocks(model: nn.Module, example_inputs: Any) -> List[str]:
    """The blocks of ``model`` that have an identity shortcut, found on one forward.

    A candidate (a composite module in an ``nn.Sequential``/``nn.ModuleList``) is one if
    its output has its input's shape and its autograd graph adds its input unchanged.

    Example:
        >>> from razorlib.models import ResNet
        >>> residual_blocks(ResNet(depth=18, stem='cifar', num_classes=10),
        ...                 torch.randn(1, 3, 16, 16))
        ['stages.0.0', 'stages.0.1', 'stages.1.1', 'stages.2.1', 'stages.3.1']
    """
    found: List[str] = []
    handles = []
    leaves: Dict[str, torch.Tensor] = {}

    def pre_hook(name):
        def hook(module, args, kwargs):
            x = _first_tensor(args, kwargs)
            if x is None or not x.is_floating_point():
                return None
            leaves[name] = x.detach().requires_grad_(True)
            if args and args[0] is x:
                return (leaves[name], *args[1:]), kwargs
            return args, {**kwargs, 'hidden_states': leaves[name]}
        return hook

    def hook(name):
        def after(module, args, kwargs, output):
            leaf, out = leaves.pop(name, None), _main_output(output)
            if leaf is not None and out is not None and out.shape == leaf.shape and \
                    out.grad_fn is not None and _adds_input(out, leaf):
                found.append(name)
        return after

    for name, block in _candidates(model):
        handles.append(block.register_forward_pre_hook(pre_hook(name), with_kwargs=True))
        handles.append(block.register_forward_hook(hook(name), with_kwargs=True))
    try:
        with evaluating(model), torch.enable_grad():
            call_model(model, example_inputs)
    finally:
        for handle in handles:
            handle.remove()
    return sorted(set(found), key=[n for n, _ in _candidates(model)].index)


def _cosine_distance(x: torch.Tensor, y: torch.Tensor) -> Tuple[float, int]:
    """Summed ``1 - cos`` over positions (channels on dim 1 of a 4-D/5-D map, on the last
    dim otherwise) and the number of positions."""
    dim = 1 if x.dim() >= 4 else -1
    x, y = x.movedim(dim, -1).flatten(0, -2).double(), y.movedim(dim, -1).flatten(0, -2).double()
    cos = nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-12)
    return float((1 - cos).sum()), cos.numel()


@contextlib.contextmanager
def _inputs_kept(modules: Dict[str, nn.Module], inputs: Dict[str, torch.Tensor]
                 ) -> Iterator[None]:
    """Keep a copy of each module's input as its call starts: a block that adds to its
    input in place (``x += f(x)``) leaves it equal to its output by the time it returns."""
    def hook(name):
        def before(module, args, kwargs):
            x = _first_tensor(args, kwargs)
            if x is not None:
                inputs[name] = x.clone()
        return before

    handles = [m.register_forward_pre_hook(hook(n), with_kwargs=True)
               for n, m in modules.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _watch(modules: Dict[str, nn.Module], totals: Dict[str, List[float]]) -> Iterator[None]:
    inputs: Dict[str, torch.Tensor] = {}

    def hook(name):
        def after(module, args, kwargs, output):
            x, y = inputs.pop(name, None), _main_output(output)
            if x is not None and y is not None and x.shape == y.shape:  # else refused after
                distance, count = _cosine_distance(x, y)
                totals[name][0] += distance
                totals[name][1] += count
        return after

    handles = [m.register_forward_hook(hook(n), with_kwargs=True) for n, m in modules.items()]
    try:
        with _inputs_kept(modules, inputs):
            yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _checked_skippable(modules: Dict[str, nn.Module]) -> Iterator[None]:
    """Refuse, after the forwards run inside, a block they did not run, whose input they
    do not find, or whose output has another shape than its input (a stride-2 or
    widening block): skipping it would change the model's shapes, and its scores would
    mean nothing.  Only shapes are kept (an in-place block changes its input's values,
    not its shape)."""
    given: Dict[str, Optional[Tuple[int, ...]]] = {}
    shapes: Dict[str, Tuple[Any, Any]] = {}

    def enter(name):
        def before(module, args, kwargs):
            x = _first_tensor(args, kwargs)
            given[name] = None if x is None else tuple(x.shape)
        return before

    def leave(name):
        def after(module, args, kwargs, output):
            y = _main_output(output)
            shapes.setdefault(name, (given.pop(name, None),
                                     None if y is None else tuple(y.shape)))
        return after

    handles = [hook for n, m in modules.items()
               for hook in (m.register_forward_pre_hook(enter(n), with_kwargs=True),
                            m.register_forward_hook(leave(n), with_kwargs=True))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
    for name in modules:
        if name not in shapes:
            raise ValueError(f'block {name!r}: the forward does not run it, so nothing '
                             'measures it; leave it out of blocks=')
        received, returned = shapes[name]
        if received is None:
            raise ValueError(f'block {name!r}: its input is neither its first positional '
                             'argument nor hidden_states=, so it cannot be skipped; leave it '
                             'out of blocks=')
        if received != returned:
            raise ValueError(f'block {name!r} maps a tensor of shape {received} to '
                             f'{returned}: only a block that keeps its input\'s shape (a '
                             'residual block) can be removed; leave it out of blocks=')


def _default_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    output = call_model(model, batch)
    loss = output.get('loss') if isinstance(output, dict) else getattr(output, 'loss', None)
    if loss is None:
        raise ValueError("metric='loss' needs a loss: pass loss_fn=(model, batch) -> loss, or "
                         "batches whose forward returns one (a Hugging Face model given "
                         "'labels')")
    return loss


@contextlib.contextmanager
def _skipped(name: str, block: nn.Module) -> Iterator[None]:
    """``block`` returns its input (as it was given) in place of its output."""
    inputs: Dict[str, torch.Tensor] = {}

    def skip(module, args, kwargs, output):
        x = inputs.pop(name, None)
        return _with_main_output(output, x) if x is not None else output

    handle = block.register_forward_hook(skip, with_kwargs=True)
    try:
        with _inputs_kept({name: block}, inputs):
            yield
    finally:
        handle.remove()


def block_importance(model: nn.Module, batches: Iterable[Any], blocks: Sequence[str],
                     metric: str = 'cosine', loss_fn: Optional[LossFn] = None) -> Dict[str, float]:
    """How much each block matters on ``batches`` (higher: keep first).

    Args:
        model: the model; run in eval mode without gradients.
        batches: inputs of one forward each (a tensor, tuple or dict of kwargs).
        blocks: names of the blocks to rank.
        metric: ``'cosine'`` (``1 - cos`` of a block's input and output) or ``'loss'``
            (loss with the block skipped minus the full model's loss).
        loss_fn: ``(model, batch) -> scalar`` for ``'loss'``; default the ``loss`` the
            forward returns (a Hugging Face model given ``labels``).
    """
    if metric not in ('cosine', 'loss'):
        raise ValueError(f"metric must be 'cosine' or 'loss', got {metric!r}")
    modules = dict(model.named_modules())
    missing = [name for name in blocks if name not in modules]
    if missing:
        raise ValueError(f'blocks {missing} are not modules of the model')
    batches = list(batches)
    if not batches:
        raise ValueError('block_importance needs at least one calibration batch')
    watched = {name: modules[name] for name in blocks}
    with evaluating(model), torch.no_grad():
        if metric == 'cosine':
            totals = {name: [0.0, 0] for name in blocks}
            with _checked_skippable(watched), _watch(watched, totals):
                for batch in batches:
                    call_model(model, batch)
            return {name: total / max(count, 1) for name, (total, count) in totals.items()}
        loss_fn = loss_fn or _default_loss
        with _checked_skippable(watched):
            base = sum(float(loss_fn(model, batch)) for batch in batches)
        scores = {}
        for name in blocks:
            with _skipped(name, modules[name]):
                scores[name] = (sum(float(loss_fn(model, b)) for b in batches) - base) \
                    / len(batches)
        return scores


def select_blocks(importance: Dict[str, float], num: Optional[int] = None,
                  ratio: Optional[float] = None) -> List[str]:
    """The ``num`` least important blocks, or ``round(ratio * len)`` of them.

    Example:
        >>> select_blocks({'a': 0.3, 'b': 0.1, 'c': 0.2, 'd': 0.9}, ratio=0.5)
        ['b', 'c']
    """
    if (num is None) == (ratio is None):
        raise ValueError('give the number of blocks to remove (num=) or their fraction '
                         '(ratio=), one of them')
    if ratio is not None:
        if not 0 <= ratio < 1:
            raise ValueError(f'ratio is the fraction of blocks to remove, in [0, 1), got {ratio}')
        num = int(round(ratio * len(importance)))
    if not 0 <= num < max(len(importance), 1):
        raise ValueError(f'cannot remove {num} of {len(importance)} blocks: keep at least one')
    order = sorted(importance, key=lambda name: (importance[name], name))
    return sorted(order[:num], key=list(importance).index)


def remove_blocks(model: nn.Module, names: Sequence[str]) -> nn.Module:
    """Remove the blocks ``names`` (``'stages.1.2'``) from their containers, in place.

    The remaining blocks of a container are renumbered (``stages.1.3`` becomes
    ``stages.1.2``), as a model built with fewer blocks names them.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2))
        >>> len(remove_blocks(net, ['1']))
        2
    """
    modules = dict(model.named_modules())
    by_container: Dict[str, List[int]] = {}
    for name in names:
        parent, _, index = name.rpartition('.')
        container = modules.get(parent)
        if not isinstance(container, _CONTAINERS) or not index.isdigit() or \
                int(index) >= len(container):
            raise ValueError(f'{name!r} is not a block of an nn.Sequential or nn.ModuleList '
                             'of the model')
        by_container.setdefault(parent, []).append(int(index))
    for parent, indices in by_container.items():
        for index in sorted(set(indices), reverse=True):
            del modules[parent][index]
    return model


def prune_depth(model: nn.Module, batches: Iterable[Any], num: Optional[int] = None,
                ratio: Optional[float] = None, blocks: Optional[Sequence[str]] = None,
                metric: str = 'cosine', loss_fn: Optional[LossFn] = None) -> DepthPruned:
    """A copy of ``model`` without its ``num`` (or ``ratio`` of its) least important
    residual blocks; ``model`` is left untouched.

    Args:
        model: the model.
        batches: calibration inputs, one forward each; the first also finds the blocks.
        num: how many blocks to remove; or
        ratio: the fraction of the blocks to remove.
        blocks: the candidate blocks; default :func:`residual_blocks`.
        metric: ``'cosine'`` or ``'loss'`` (:func:`block_importance`).
        loss_fn: ``(model, batch) -> loss`` for ``'loss'``.

    Example:
        >>> from razorlib.models import ResNet
        >>> net = ResNet(depth=18, stem='cifar', num_classes=10).eval()
        >>> result = prune_depth(net, [torch.randn(2, 3, 16, 16)], num=2)
        >>> len(result.removed), result.model(torch.randn(1, 3, 16, 16)).shape
        (2, torch.Size([1, 10]))
    """
    batches = list(batches)
    if not batches:
        raise ValueError('prune_depth needs at least one calibration batch')
    blocks = list(blocks) if blocks is not None else residual_blocks(model, batches[0])
    importance = block_importance(model, batches, blocks, metric, loss_fn)
    removed = select_blocks(importance, num, ratio)
    return DepthPruned(remove_blocks(copy.deepcopy(model), removed), removed, importance)
