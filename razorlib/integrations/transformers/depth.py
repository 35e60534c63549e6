"""Depth pruning of Hugging Face decoder/encoder stacks: drop whole layers and keep the
config, the layers' ``layer_idx`` (the KV cache's index) and per-layer config lists in
step, so ``save_pretrained`` + ``from_pretrained`` rebuilds the shallower model."""
import copy
from typing import Any, Iterable, List, Optional, Sequence

import torch.nn as nn

from ...pruning.depth import DepthPruned, LossFn, block_importance, remove_blocks, select_blocks
from .config import build_like, is_hf_model, module_numbers

__all__ = ['decoder_layers', 'remove_decoder_layers', 'prune_decoder_layers']


def decoder_layers(model: nn.Module) -> str:
    """The name of the ``nn.ModuleList`` holding the model's ``num_hidden_layers`` layers.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> decoder_layers(GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=2, n_head=2,
        ...                                           vocab_size=20, n_positions=8)))
        'transformer.h'
    """
    count = getattr(model.config, 'num_hidden_layers', None)
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count and \
                len({type(layer) for layer in module}) == 1:
            return name
    raise ValueError(f'{type(model).__name__}: no nn.ModuleList of num_hidden_layers='
                     f'{count} layers found; pass the blocks to razorlib.pruning.depth')


#: Config lists of layer indices, not of one entry per layer: Llama 4's ``moe_layers``
#: (``[0, 1, 2, 3]`` in a 4-layer Scout, which reads as one entry per layer too) and
#: Qwen2/3-MoE's ``mlp_only_layers``.  A cut renumbers them.
_LAYER_INDEX_FIELDS = ('moe_layers', 'mlp_only_layers')


def _per_layer_fields(config, count: int) -> List[str]:
    """Config lists with one entry per layer (``layer_types``)."""
    return [name for name, value in vars(config).items()
            if 'layer' in name and name not in _LAYER_INDEX_FIELDS
            and isinstance(value, (list, tuple)) and len(value) == count]


def _index_fields(config) -> List[str]:
    """The config's lists of layer indices (:data:`_LAYER_INDEX_FIELDS`)."""
    return [name for name in _LAYER_INDEX_FIELDS
            if isinstance(getattr(config, name, None), (list, tuple))]


def _check_rebuilds(model: nn.Module, stack: str, keep: List[int], config,
                    rewritten: Sequence[str]) -> None:
    """Raise unless a model built from ``config`` (the rewritten one) holds, at each new
    position, a layer of the kind the shallower model keeps there (the same parameter
    names): a config field that places layers by index or stride, which the rewrite does
    not follow (Qwen2-MoE's ``decoder_sparse_step``), would make
    ``from_pretrained`` build MoE blocks where MLPs are and initialise their weights."""
    built = build_like(model, config).get_submodule(stack)
    dense = build_like(model).get_submodule(stack)  # the config as it is, widths aside
    layers = model.get_submodule(stack)
    for new, old in enumerate(keep):
        _check_numbers(model, dense[old], built[new], old, new, len(keep))
        ours = {name for name, _ in layers[old].named_parameters()}
        theirs = {name for name, _ in built[new].named_parameters()}
        if ours != theirs:
            fields = sorted(name for name, value in vars(config).items()
                            if name not in ('num_hidden_layers', *rewritten)
                            and not name.startswith('_')
                            and any(word in name for word in ('layer', 'sparse', 'step'))
                            and isinstance(value, (int, list, tuple)))
            raise ValueError(
                f'removing layers of {type(model).__name__}: a config with '
                f'num_hidden_layers={len(keep)} builds another kind of layer at position '
                f'{new} than layer {old} that would move there ({len(theirs - ours)} '
                f'parameters it lacks, {len(ours - theirs)} it does not build); the config '
                f'places layers by fields this rewrite does not follow ({fields}); nothing '
                'was removed')


def _check_numbers(model: nn.Module, before: nn.Module, built: nn.Module, old: int, new: int,
                   count: int) -> None:
    """Raise where a layer built at ``new`` from the rewritten config holds another number
    than one built at ``old`` from the config as it was (both from configs, so pruned
    widths, which the channel file keeps, do not count): a value computed from the layer
    count or position (MiniCPM3's ``residual_scale = scale_depth /
    sqrt(num_hidden_layers)``) would change on a reload, and the reloaded model would
    compute something else than the layer that moved."""
    skip = ('training', *_LAYER_INDEX_ATTRS)  # the position in the stack moves
    ours, theirs = module_numbers(before, skip), module_numbers(built, skip)
    differ = [key for key in ours if key in theirs and ours[key] != theirs[key]]
    if differ:
        key = differ[0]
        raise ValueError(f'removing layers of {type(model).__name__}: a config with '
                         f'num_hidden_layers={count} builds layer {new} with {key}='
                         f'{theirs[key]!r} where layer {old}, moving there, holds {ours[key]!r} '
                         '(a value computed from the layer count or position); a reload would '
                         'compute otherwise; nothing was removed')


#: Attributes that hold a layer's position in its stack, which the KV cache is indexed by
#: (``layer_idx``; GPT-Neo's, RWKV's and Reformer's ``layer_id``): renumbered after a cut.
_LAYER_INDEX_ATTRS = ('layer_idx', 'layer_id')


def remove_decoder_layers(model: nn.Module, indices: Sequence[int]) -> nn.Module:
    """Remove the layers at ``indices`` from a transformers model, in place.

    The config's ``num_hidden_layers``, its per-layer lists (``layer_types``) and its
    lists of layer indices (Llama 4's ``moe_layers``, Qwen2-MoE's ``mlp_only_layers``:
    the kept layers renumbered) follow, and every remaining layer's modules get their new
    position as ``layer_idx``.  A model whose config would then build another kind of
    layer at some position (layers placed by a stride, as Qwen2-MoE's
    ``decoder_sparse_step``) is refused before anything changes (:func:`_check_rebuilds`).

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> llama = LlamaForCausalLM(LlamaConfig(
        ...     hidden_size=16, intermediate_size=32, num_hidden_layers=3,
        ...     num_attention_heads=2, num_key_value_heads=1, vocab_size=20))
        >>> llama = remove_decoder_layers(llama, [1])
        >>> llama.config.num_hidden_layers, llama.model.layers[1].self_attn.layer_idx
        (2, 1)
    """
    if not is_hf_model(model):
        raise TypeError(f'remove_decoder_layers takes a transformers model, got a '
                        f'{type(model).__name__}; use razorlib.pruning.depth.remove_blocks')
    config = model.config
    if getattr(config, 'scale_attn_by_inverse_layer_idx', False):
        raise ValueError('this model scales attention by 1 / (layer_idx + 1) '
                         '(scale_attn_by_inverse_layer_idx): removing layers would change '
                         'the scale of the layers after them')
    stack = decoder_layers(model)
    count = len(model.get_submodule(stack))
    drop = sorted(set(int(i) for i in indices))
    if any(not 0 <= i < count for i in drop) or len(drop) >= count:
        raise ValueError(f'{stack} has {count} layers: cannot remove {drop} (keep at least one)')
    keep = [i for i in range(count) if i not in drop]
    lists, indexed = _per_layer_fields(config, count), _index_fields(config)
    rewritten = copy.deepcopy(config)
    rewritten.num_hidden_layers = len(keep)
    for name in lists:
        value = getattr(config, name)
        setattr(rewritten, name, type(value)(value[i] for i in keep))
    for name in indexed:
        value = getattr(config, name)
        setattr(rewritten, name, type(value)(keep.index(i) for i in value if i in keep))
    lists += indexed
    _check_rebuilds(model, stack, keep, rewritten, lists)
    remove_blocks(model, [f'{stack}.{i}' for i in drop])
    for new, layer in enumerate(model.get_submodule(stack)):
        for module in layer.modules():
            for attr in _LAYER_INDEX_ATTRS:
                if isinstance(getattr(module, attr, None), int):
                    setattr(module, attr, new)
    for name in ['num_hidden_layers'] + lists:
        setattr(config, name, getattr(rewritten, name))
    return model


def prune_decoder_layers(model: nn.Module, batches: Iterable[Any], num: Optional[int] = None,
                         ratio: Optional[float] = None, metric: str = 'cosine',
                         loss_fn: Optional[LossFn] = None) -> DepthPruned:
    """A copy of a transformers model without its ``num`` (or ``ratio`` of its) least
    important layers (:func:`razorlib.pruning.depth.block_importance`).

    Args:
        model: a transformers model; left untouched.
        batches: calibration inputs (``{'input_ids': ...}``; with ``labels`` for
            ``metric='loss'``).
        num: how many layers to remove; or
        ratio: the fraction of the layers to remove.
        metric: ``'cosine'`` or ``'loss'``.
        loss_fn: ``(model, batch) -> loss`` for ``'loss'``; default the model's own.

    Returns:
        the shallower copy (config and ``layer_idx`` rewritten), the removed layers'
        names and every layer's importance.
    """
    stack = decoder_layers(model)
    blocks = [f'{stack}.{i}' for i in range(len(model.get_submodule(stack)))]
    importance = block_importance(model, batches, blocks, metric, loss_fn)
    removed = select_blocks(importance, num, ratio)
    slim = remove_decoder_layers(copy.deepcopy(model),
                                 [int(name.rpartition('.')[2]) for name in removed])
    return DepthPruned(slim, removed, importance)
