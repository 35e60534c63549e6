"""Save a pruned Hugging Face model and load it back in one call, whatever its widths.

Widths the config can describe (uniform across layers, after :func:`~.config.sync_config`)
reload with plain ``from_pretrained``.  Widths it cannot (an MLP that differs per layer)
are saved beside the weights as a channel config (``razorlib_channels.json``) relative
to the model the saved config builds; :func:`load_pruned` builds that model, slices it
with the channel config and loads the weights.  One channel config slices an attention
module's whole heads or the same positions of every head, not both; a model pruned both
ways (twice: whole heads, then the head width, or the reverse) gets a second channel
config (``razorlib_head_widths.json``) that narrows the heads the first left whole.
"""
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import torch.nn as nn

from ...layers import LayerKindsArg, as_table, head_attributes_of
from ...pruning.channel_config import ChannelConfig, ChannelSelection
from ...pruning.slicing import slim_model
from .config import ConfigSync, build_like, shape_mismatches, sync_config

__all__ = ['CHANNELS_FILE', 'HEAD_WIDTHS_FILE', 'widths_channel_configs', 'save_pruned',
           'load_pruned']

#: The file beside the weights that holds the widths the config cannot describe.
CHANNELS_FILE = 'razorlib_channels.json'
#: The channel config applied after :data:`CHANNELS_FILE`, where that one cut whole heads
#: of attention modules whose head width was pruned too: it narrows the heads left.
HEAD_WIDTHS_FILE = 'razorlib_head_widths.json'
#: The channel files in the order a reload applies them.
CHANNEL_FILES = (CHANNELS_FILE, HEAD_WIDTHS_FILE)


def _prefix(raw: int, count: int) -> ChannelSelection:
    return ChannelSelection(raw, tuple(range(count)))


def _head_widths(model: nn.Module, reference: nn.Module) -> Dict[str, Tuple[int, int]]:
    """``{layer name: (dense head_dim, slim head_dim)}`` for the layers of each attention
    module whose ``head_dim`` was narrowed (``heads='width'``).  A module that counts its
    heads only (MGP-STR's, timm's: no ``head_dim``) has none narrowed."""
    ref_modules = dict(reference.named_modules())
    found = {}
    for name, module in model.named_modules():
        spec, ref = head_attributes_of(module), ref_modules.get(name)
        if spec is None or ref is None:
            continue
        slim, dense = getattr(module, spec.head_dim, None), getattr(ref, spec.head_dim, None)
        if isinstance(dense, int) and isinstance(slim, int) and slim != dense:
            for child, _ in module.named_children():
                found[f'{name}.{child}' if name else child] = (dense, slim)
    return found


def _selection(raw: int, count: int, head_dims: Optional[Tuple[int, int]]) -> ChannelSelection:
    """The first ``count`` of ``raw`` channels, or, on an axis of narrowed heads
    (``head_dims``: the dense and the slim ``head_dim``), the first positions of every
    head: slicing tells head widths from whole heads by that pattern
    (``pruning/slicing.py``), and the prefix would read as fewer, whole heads.  Where
    fewer heads are left too, one selection cannot say both: it keeps those heads whole,
    ``count // slim`` heads of the dense width, for a second channel config to narrow
    (:func:`widths_channel_configs`)."""
    if head_dims is not None:
        dense, slim = head_dims
        if raw % dense == 0 and count * dense == raw * slim:
            return ChannelSelection(raw, tuple(h * dense + j for h in range(raw // dense)
                                               for j in range(slim)))
        if count % slim == 0 and count // slim * dense < raw:
            return _prefix(raw, count // slim * dense)
    return _prefix(raw, count)


def widths_channel_configs(model: nn.Module, reference: nn.Module,
                           layer_kinds: LayerKindsArg = None) -> List[ChannelConfig]:
    """The channel configs that, applied in turn, slice ``reference`` (in place) to
    ``model``'s widths: one, or two where an attention module has both fewer heads and
    a narrower ``head_dim`` than ``reference``'s (the first cuts its whole heads, the
    second narrows them: one slice cannot do both).

    Each keeps the first channels of each axis (the first positions of every head where
    ``head_dim`` was narrowed): which ones does not matter, the weights come from
    ``model``'s state dict.  Parameters of modules without a layer kind (a layer
    scale, a position embedding) are compared dim by dim.

    Raises:
        ValueError: naming the tensors the configs do not bring to ``model``'s shape.
    """
    configs = [_channel_config(model, reference, layer_kinds)]
    sliced = slim_model(reference, configs[0], layer_kinds)
    if _head_widths(model, sliced):  # heads left whole, to narrow
        configs.append(_channel_config(model, sliced, layer_kinds))
        sliced = slim_model(sliced, configs[1], layer_kinds)
    left = shape_mismatches(model, sliced)
    if left:
        raise ValueError('the slim model differs from its config in ways razorlib cannot '
                         'write as a channel config: ' + '; '.join(map(str, left[:5])))
    return configs


def _channel_config(model: nn.Module, reference: nn.Module,
                    layer_kinds: LayerKindsArg) -> ChannelConfig:
    """One channel config towards ``model``'s widths from ``reference``'s (see
    :func:`widths_channel_configs`)."""
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
    return cfg


def dump_channel_files(configs: List[ChannelConfig], directory: Path) -> None:
    """Write ``configs`` to :data:`CHANNEL_FILES` in ``directory``, in order, and remove
    the files of stages ``configs`` does not have (left by an earlier save)."""
    for index, name in enumerate(CHANNEL_FILES):
        path = directory / name
        if index < len(configs):
            configs[index].dump(path)
        elif path.exists():
            path.unlink()


def load_channel_files(directory: Path) -> List[ChannelConfig]:
    """The channel configs :func:`dump_channel_files` wrote in ``directory``, in order.

    Raises:
        ValueError: a second-stage file without the first, naming both.
    """
    found = [directory / name for name in CHANNEL_FILES if (directory / name).exists()]
    if found and found[0].name != CHANNELS_FILE:
        raise ValueError(f'{found[0]} narrows heads that {directory / CHANNELS_FILE} cuts, '
                         'and that file is missing')
    return [ChannelConfig.load(path) for path in found]


def save_pruned(model: nn.Module, directory: Union[str, Path],
                layer_kinds: LayerKindsArg = None, **save_kwargs) -> ConfigSync:
    """Save a pruned transformers model so that :func:`load_pruned` rebuilds it.

    Rewrites ``model.config`` (:func:`~.config.sync_config`), runs
    ``model.save_pretrained(directory, **save_kwargs)`` and, when the config cannot
    describe every width, writes ``razorlib_channels.json`` beside it (and
    ``razorlib_head_widths.json`` for heads pruned both whole and in width,
    :func:`widths_channel_configs`).

    Returns:
        what the config rewrite changed and what the channel config holds.
    """
    sync = sync_config(model)
    channels = []
    if not sync.exact:  # checked before anything is written
        channels = widths_channel_configs(model, build_like(model), layer_kinds)
    directory = Path(directory)
    model.save_pretrained(directory, **save_kwargs)
    dump_channel_files(channels, directory)
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
    ``__init__`` slices the model the config builds to the saved widths (by each channel
    file in turn, :data:`CHANNEL_FILES`), so transformers' own loading (checkpoint key
    renaming, shape checks, shards, dtypes, devices) fills the slim layers; the model
    returned is of ``model_class`` itself.

    Args:
        directory: the folder ``save_pruned`` wrote.
        model_class: the transformers class; default the config's ``architectures``.
        layer_kinds: layer kinds used when the model was pruned, if not the registry's.
        **from_kwargs: ``from_pretrained`` arguments (``dtype``, ``device_map``);
            with ``output_loading_info=True`` it returns ``(model, loading info)``.

    Raises:
        ValueError: naming the folder and the weights, when a weight of the model was not
            loaded from the checkpoint (it would be freshly initialised) or one of the
            checkpoint was not used, other than those transformers itself declares
            ignorable for the class (tied weights, ``_keys_to_ignore_on_load_*``); or
            naming the files, when ``razorlib_head_widths.json`` is there without
            ``razorlib_channels.json``.

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
    channels = load_channel_files(directory)
    if not channels:
        return _from_pretrained(model_class, directory, from_kwargs)

    class Sliced(model_class):  # what from_pretrained builds is sliced before it loads
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for cfg in channels:
                slim_model(self, cfg, layer_kinds)

        def _initialize_missing_keys(self, *args, **kwargs):
            # transformers then initialises every module, each init a no-op on a loaded
            # tensor, but some compute the value first, for the shapes the module has:
            # Whisper's sinusoids(*embed_positions.weight.shape) refuses an odd width,
            # which a pruned hidden size may be.  A module whose tensors were all loaded
            # has nothing to initialise (a weight not loaded is refused after loading).
            for module in self.modules():
                tensors = list(module.parameters()) + list(module.buffers())
                if tensors and all(getattr(t, '_is_hf_initialized', False) for t in tensors):
                    module._is_hf_initialized = True  # pylint: disable=protected-access
            return super()._initialize_missing_keys(*args, **kwargs)

    # transformers tells its own classes from custom code by ``__module__``
    # (``PreTrainedModel.is_custom_code``) and skips the checkpoint conversion mappings
    # (``embed_out`` -> ``lm_head`` of GPT-NeoX, ...) and changes how weights are
    # initialised for custom code: the subclass must read as ``model_class`` itself.
    for attr in ('__module__', '__name__', '__qualname__', '__doc__'):
        setattr(Sliced, attr, getattr(model_class, attr))
    loaded = _from_pretrained(Sliced, directory, from_kwargs)
    model = loaded[0] if isinstance(loaded, tuple) else loaded
    model.__class__ = model_class
    return loaded


def _from_pretrained(model_class: type, directory: Path, from_kwargs: dict):
    """``model_class.from_pretrained(directory, **from_kwargs)``, refused when a weight of
    the model was not loaded from the checkpoint or one of the checkpoint was left over
    (transformers only logs it, and the weight is then freshly initialised)."""
    from_kwargs = dict(from_kwargs)
    want_info = from_kwargs.pop('output_loading_info', False)
    model, info = model_class.from_pretrained(directory, output_loading_info=True,
                                              **from_kwargs)
    _check_loading(info, directory, model_class.__name__)
    return (model, info) if want_info else model


def _check_loading(info: dict, directory: Path, class_name: str) -> None:
    """Raise ``ValueError`` naming what ``from_pretrained`` reported as not loaded.

    ``info`` is transformers' loading info: its keys the class itself declares
    ignorable (``_keys_to_ignore_on_load_missing`` / ``_unexpected``, tied weights) are
    already left out, and non-persistent buffers are never in it."""
    problems = []
    for what, keys in (('missing from the checkpoint (freshly initialised)',
                        info.get('missing_keys')),
                       ('in the checkpoint but not in the model', info.get('unexpected_keys')),
                       ('of another shape in the checkpoint', [
                           f'{key[0]} {tuple(key[1])} vs {tuple(key[2])}'
                           if isinstance(key, tuple) and len(key) == 3 else str(key)
                           for key in info.get('mismatched_keys') or ()]),
                       ('errors', info.get('error_msgs'))):
        keys = sorted(map(str, keys or ()))
        if keys:
            shown = ', '.join(keys[:8]) + (f' (and {len(keys) - 8} more)' if len(keys) > 8
                                           else '')
            problems.append(f'{what}: {shown}')
    if problems:
        raise ValueError(f'load_pruned: {class_name} from {directory} does not hold the saved '
                         'weights; ' + '; '.join(problems))
