"""Save a pruned Hugging Face model and load it back in one call, whatever its widths.

Widths the config can describe (uniform across layers, after :func:`~.config.sync_config`)
reload with plain ``from_pretrained``.  Widths it cannot (an MLP that differs per layer)
are saved beside the weights as a channel config (``razorlib_channels.json``) relative
to the model the saved config builds; :func:`load_pruned` builds that model, slices it
with the channel config and loads the weights.
"""
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import torch.nn as nn

from ...layers import LayerKindsArg, as_table, head_attributes_of
from ...pruning.channel_config import ChannelConfig, ChannelSelection
from ...pruning.slicing import slim_model
from .config import ConfigSync, build_like, shape_mismatches, sync_config

__all__ = ['CHANNELS_FILE', 'widths_channel_config', 'save_pruned', 'load_pruned']

#: The file beside the weights that holds the widths the config cannot describe.
CHANNELS_FILE = 'razorlib_channels.json'


def _prefix(raw: int, count: int) -> ChannelSelection:
    return ChannelSelection(raw, tuple(range(count)))


def _head_widths(model: nn.Module, reference: nn.Module) -> Dict[str, Tuple[int, int]]:
    """``{layer name: (dense head_dim, slim head_dim)}`` for the layers of each attention
    module whose ``head_dim`` was narrowed (``heads='width'``)."""
    ref_modules = dict(reference.named_modules())
    found = {}
    for name, module in model.named_modules():
        spec, ref = head_attributes_of(module), ref_modules.get(name)
        if spec is None or ref is None:
            continue
        slim, dense = getattr(module, spec.head_dim), getattr(ref, spec.head_dim, None)
        if isinstance(dense, int) and slim != dense:
            for child, _ in module.named_children():
                found[f'{name}.{child}' if name else child] = (dense, slim)
    return found


def _selection(raw: int, count: int, head_dims: Optional[Tuple[int, int]]) -> ChannelSelection:
    """The first ``count`` of ``raw`` channels, or, on an axis of narrowed heads (the
    same number of heads of ``head_dims[1]`` out of ``head_dims[0]``), the first
    positions of every head: slicing tells head widths from whole heads by that pattern
    (``pruning/slicing.py``), and the prefix would read as fewer, whole heads."""
    if head_dims is not None:
        dense, slim = head_dims
        if raw % dense == 0 and count * dense == raw * slim:
            return ChannelSelection(raw, tuple(h * dense + j for h in range(raw // dense)
                                               for j in range(slim)))
    return _prefix(raw, count)


def widths_channel_config(model: nn.Module, reference: nn.Module,
                          layer_kinds: LayerKindsArg = None) -> ChannelConfig:
    """The channel config that slices ``reference`` to ``model``'s widths.

    It keeps the first channels of each axis (the first positions of every head where
    ``head_dim`` was narrowed): which ones does not matter, the weights come from
    ``model``'s state dict.  Parameters of modules without a layer kind (a layer
    scale, a position embedding) are compared dim by dim.

    Raises:
        ValueError: naming the tensors the config does not bring to ``model``'s shape.
    """
    kinds = as_table(layer_kinds)
    ref_modules = dict(reference.named_modules())
    head_widths = _head_widths(model, reference)
    cfg = ChannelConfig()
    for name, module in model.named_modules():
        ref = ref_modules.get(name)
        kind = kinds.kind_of(module)
        if ref is None or type(ref) is not type(module):
            continue
        if kind is not None and kind.axes:
            widths, raw = kind.widths(module), kind.widths(ref)
            axes = {axis: _selection(raw[axis], widths[axis], head_widths.get(name))
                    for axis in kind.axes if widths[axis] != raw[axis]}
            if axes:
                cfg.modules[name] = axes
            continue
        for attr, tensor in module.named_parameters(recurse=False):
            ref_tensor = getattr(ref, attr)
            dims = {dim: _prefix(size, tensor.shape[dim])
                    for dim, size in enumerate(ref_tensor.shape) if tensor.shape[dim] != size}
            if dims and tensor.dim() == ref_tensor.dim():
                cfg.params[f'{name}.{attr}' if name else attr] = dims
    sliced = slim_model(reference, cfg, layer_kinds)
    left = shape_mismatches(model, sliced)
    if left:
        raise ValueError('the slim model differs from its config in ways razorlib cannot '
                         'write as a channel config: ' + '; '.join(map(str, left[:5])))
    return cfg


def save_pruned(model: nn.Module, directory: Union[str, Path],
                layer_kinds: LayerKindsArg = None, **save_kwargs) -> ConfigSync:
    """Save a pruned transformers model so that :func:`load_pruned` rebuilds it.

    Rewrites ``model.config`` (:func:`~.config.sync_config`), runs
    ``model.save_pretrained(directory, **save_kwargs)`` and, when the config cannot
    describe every width, writes ``razorlib_channels.json`` beside it.

    Returns:
        what the config rewrite changed and what the channel config holds.
    """
    sync = sync_config(model)
    channels = None
    if not sync.exact:  # checked before anything is written
        channels = widths_channel_config(model, build_like(model), layer_kinds)
    directory = Path(directory)
    model.save_pretrained(directory, **save_kwargs)
    path = directory / CHANNELS_FILE
    if channels is not None:
        channels.dump(path)
    elif path.exists():
        path.unlink()
    return sync


def _model_class(config, directory: Path) -> type:
    import transformers
    names = getattr(config, 'architectures', None) or []
    for name in names:
        if hasattr(transformers, name):
            return getattr(transformers, name)
    raise ValueError(f'{directory}/config.json names no transformers class in '
                     f'"architectures" ({names}); pass model_class=')


def load_pruned(directory: Union[str, Path], model_class: Optional[type] = None,
                layer_kinds: LayerKindsArg = None, **from_kwargs) -> nn.Module:
    """Load what :func:`save_pruned` wrote, as ``from_pretrained`` does (eval mode).

    Without a channel file this is ``model_class.from_pretrained(directory,
    **from_kwargs)``.  With one, ``from_pretrained`` runs on a subclass whose
    ``__init__`` slices the model the config builds to the saved widths, so transformers'
    own loading (checkpoint key renaming, shape checks, shards, dtypes, devices) fills
    the slim layers; the model returned is of ``model_class`` itself.

    Args:
        directory: the folder ``save_pruned`` wrote.
        model_class: the transformers class; default the config's ``architectures``.
        layer_kinds: layer kinds used when the model was pruned, if not the registry's.
        **from_kwargs: ``from_pretrained`` arguments (``dtype``, ``device_map``).

    Example:
        >>> import random, tempfile, torch
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from razorlib.integrations.transformers import prune
        >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=20,
        ...                                   n_positions=8))
        >>> x = {'input_ids': torch.randint(0, 20, (1, 8))}
        >>> random.seed(3)  # RatioPruner draws 0.25 for one MLP, 0.75 for the other
        >>> slim = prune(gpt2, x, pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)),
        ...              uniform=False)
        >>> [block.mlp.c_fc.nf for block in slim.transformer.h]
        [16, 48]
        >>> folder = tempfile.mkdtemp()
        >>> sync = save_pruned(slim, folder)
        >>> sync.exact, (Path(folder) / CHANNELS_FILE).exists()  # per-layer widths
        (False, True)
        >>> again = load_pruned(folder)
        >>> torch.equal(again(**x).logits, slim.eval()(**x).logits)
        True
    """
    from transformers import AutoConfig
    directory = Path(directory)
    config = AutoConfig.from_pretrained(directory)
    model_class = model_class or _model_class(config, directory)
    path = directory / CHANNELS_FILE
    if not path.exists():
        return model_class.from_pretrained(directory, **from_kwargs)
    channels = ChannelConfig.load(path)

    class Sliced(model_class):  # what from_pretrained builds is sliced before it loads
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            slim_model(self, channels, layer_kinds)

    Sliced.__name__ = Sliced.__qualname__ = model_class.__name__
    model = Sliced.from_pretrained(directory, **from_kwargs)
    model.__class__ = model_class
    return model
