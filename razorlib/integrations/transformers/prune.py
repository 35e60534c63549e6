"""One call for Hugging Face models: prune with HF defaults, then rewrite the config.

The defaults: the hidden size (the residual stream that the embeddings, every norm and
``lm_head`` share) stays whole, because pruning it changes each norm's statistics, and
the widths of layers repeated down the stack stay uniform, so the config can describe
them and ``from_pretrained`` rebuilds the slim model.
"""
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from ...tracing.forward import call_model
from ...utils.caller import warn_at_caller
from ...utils.modes import evaluating
from .config import HIDDEN_SIZE_FIELDS, is_hf_model, sync_config

__all__ = ['prune', 'hidden_size_keys', 'with_hidden_size_keys', 'warn_if_hidden_pruned',
           'warn_if_hidden_kept', 'warn_whole_attention', 'uniform_subnet', 'split_routed_experts',
           'uniform_experts', 'describe_slim_config']


def hidden_size_keys(model: nn.Module) -> Tuple[str, ...]:
    """The names of the modules that start the residual stream: as ``except_start_keys``
    they keep the hidden size whole.  The input embeddings, and (:func:`_stream_starts`)
    the Linear that projects them to the hidden size where they are narrower (ALBERT's
    and ELECTRA's ``embedding_size``, OPT's ``word_embed_proj_dim``) and the other
    embeddings of the hidden size (positions, token types, an encoder's own: Whisper's
    ``encoder.embed_positions``, added to its convolutions' output).  Without them the
    embeddings alone keep only their own width, and the hidden size behind a projection,
    or of an encoder that does not start at the input embeddings, prunes, every norm
    with it.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> hidden_size_keys(GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2,
        ...                                             vocab_size=20, n_positions=8)))
        ('transformer.wte', 'transformer.wpe')
        >>> from transformers import AlbertConfig, AlbertForMaskedLM
        >>> hidden_size_keys(AlbertForMaskedLM(AlbertConfig(
        ...     vocab_size=20, embedding_size=8, hidden_size=16, num_hidden_layers=1,
        ...     num_attention_heads=2, intermediate_size=32)))
        ('albert.embeddings.word_embeddings', 'albert.encoder.embedding_hidden_mapping_in')
    """
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return ()
    names = tuple(name for name, module in model.named_modules() if module is embeddings)
    return names + _stream_starts(model, embeddings) if names else names


def _stream_starts(model: nn.Module, embeddings: nn.Module) -> Tuple[str, ...]:
    """Besides the input ``embeddings``, the modules of ``model`` that output the hidden
    size (``config.hidden_size``, ``n_embd`` or ``d_model``) at the start of a residual
    stream: a Linear from the embeddings' narrower width to it (ALBERT's
    ``embedding_hidden_mapping_in``, ELECTRA's ``embeddings_project``, OPT's
    ``project_in``), and every other ``nn.Embedding`` that wide (positions and token types,
    added to the stream; Whisper's encoder's ``embed_positions``)."""
    config = getattr(model, 'config', None)
    hidden = next((getattr(config, name) for name in HIDDEN_SIZE_FIELDS
                   if isinstance(getattr(config, name, None), int)), None)
    if hidden is None:
        return ()
    width = getattr(embeddings, 'embedding_dim', hidden)
    return tuple(name for name, module in model.named_modules() if module is not embeddings and (
        (isinstance(module, nn.Embedding) and module.embedding_dim == hidden)
        or (width != hidden and isinstance(module, nn.Linear) and module.in_features == width
            and module.out_features == hidden)))


def with_hidden_size_keys(model: nn.Module, keys: Union[None, str, Sequence[str]] = None
                          ) -> Tuple[str, ...]:
    """``except_start_keys`` (a prefix or several) with :func:`hidden_size_keys` added.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> with_hidden_size_keys(GPT2LMHeadModel(GPT2Config(
        ...     n_embd=16, n_layer=1, n_head=2, vocab_size=20, n_positions=8)), 'lm_head')
        ('lm_head', 'transformer.wte', 'transformer.wpe')
    """
    keys = () if keys is None else (keys, ) if isinstance(keys, str) else tuple(keys)
    return keys + hidden_size_keys(model)


def warn_if_hidden_pruned(model: nn.Module, slim: nn.Module, caller: str) -> None:
    """Warn when ``slim``'s input embeddings are narrower than ``model``'s: with the
    hidden size pruned, every norm normalises over fewer channels, so the outputs move
    by more than the pruned channels' share; only the masked supernet computes what the
    slim model does."""
    for name in hidden_size_keys(model):
        dense = [tuple(p.shape) for p in model.get_submodule(name).parameters()]
        pruned = [tuple(p.shape) for p in slim.get_submodule(name).parameters()]
        if dense != pruned:
            warn_at_caller(f'{caller}(hidden=True) pruned the hidden size of '
                           f'{type(model).__name__} ({name}: {dense} -> {pruned}): every norm '
                           'now normalises over fewer channels, so its outputs change by more '
                           'than the pruned channels\' share (the slim model computes what the '
                           'masked supernet does, not what the dense model does)', UserWarning)
            return


def warn_if_hidden_kept(model: nn.Module, groups: Any, caller: str) -> bool:
    """Under ``hidden=True``: warn when channels of :func:`hidden_size_keys` (the hidden
    size) are in no prunable group, naming the reason (a headless encoder returns the
    hidden states: ``channels of a model output``), since the option then changes
    nothing; returns whether it warned."""
    keys = hidden_size_keys(model)
    for group in groups.groups.values():
        # the keys are module-name prefixes, as except_start_keys are (DINOv2's
        # 'embeddings.patch_embeddings' names its conv's parent)
        if group.prunable or not any(layer.startswith(key) for layer in group.layers
                                     for key in keys):
            continue
        reason = f' ({group.frozen_reasons[0]})' if group.frozen_reasons else ''
        warn_at_caller(f'{caller}(hidden=True) prunes no hidden size of '
                       f'{type(model).__name__}{reason}; the rest is pruned', UserWarning)
        return True
    return False


def warn_whole_attention(model: nn.Module, groups: Any, caller: str) -> List[str]:
    """Warn when attention modules (their class named ``...Attention``) come out whole:
    none of their layers' output channels in a prunable group, for a reason other than
    ``except_start_keys``.  A user of a language model expects heads to go; where they
    stay (a fused projection cut at bounds no ``HEAD_ATTRIBUTES`` entry rewrites; a split
    with sizes of the code's own, GPTBigCode's multi-query ``c_attn``) only the MLPs
    shrink, which the FLOPs would show but nothing said.  One warning names how many, the
    first, and its reason (for an attention left with one query head, that: see
    :func:`_lone_head_reason`); returns the names.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from razorlib.pruning import L1NormPruner
        >>> gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=20,
        ...                                   n_positions=8))
        >>> pruner = L1NormPruner(except_start_keys=hidden_size_keys(gpt2))
        >>> pruner.prepare_from_supernet(gpt2, {'input_ids': torch.zeros(1, 4).long()})
        >>> warn_whole_attention(gpt2, pruner.groups, 'prune')  # its heads are prunable
        []
    """
    group_of = {layer: group for group in groups.groups.values() for layer in group.layers}
    whole = []
    for name, module in model.named_modules():
        if not type(module).__name__.endswith('Attention'):
            continue
        inside = sorted(layer for layer in group_of if layer.startswith(f'{name}.'))
        if any(group_of[layer].prunable for layer in inside):
            continue
        # a reason other than except_start_keys (the hidden size's, or the user's own):
        # the one most of the attention's layers share, the cause rather than what it
        # froze on the way (multi-query attention binds q, k and v; RoPE's product, k's)
        found = {}
        for layer in inside:
            for reason in group_of[layer].frozen_reasons:
                if reason.kind != 'except-key':
                    found.setdefault(str(reason), {})[layer] = None
        if found:
            reason, layers = max(found.items(), key=lambda item: len(item[1]))
            whole.append((name, _lone_head_reason(name, module)
                          or f'{next(iter(layers))}: {reason}'))
    if whole:
        name, why = whole[0]
        more = f' (and {len(whole) - 1} more)' if len(whole) > 1 else ''
        warn_at_caller(f'{caller}: the attention of {type(model).__name__} is left whole in '
                       f'{len(whole)} module(s), {name}{more} ({why}); the rest is pruned',
                       UserWarning)
    return [name for name, _ in whole]


#: Attention modules' attributes that count their query heads.
QUERY_HEAD_ATTRIBUTES = ('num_heads', 'num_attention_heads')


def _lone_head_reason(name: str, module: nn.Module) -> Optional[str]:
    """The plain reason an attention left with one query head stays whole: no head can
    go, since pruning keeps at least one.  What the trace froze it for is then a detail
    of the way (GPTBigCode's multi-query ``c_attn`` pruned to one query head: the key and
    value head that ``gqa='query'`` keeps whole).  ``None`` for more heads."""
    counts = [getattr(module, attribute) for attribute in QUERY_HEAD_ATTRIBUTES
              if isinstance(getattr(module, attribute, None), int)]
    if counts and counts[0] == 1:
        return f'{name}: 1 query head left, and pruning keeps at least one'
    return None


def _layer_pattern(space_id: str) -> str:
    """The space id with its layer indices wild: ``model.layers.*.mlp.up_proj``."""
    return re.sub(r'(?<=\.)\d+(?=\.|$)', '*', space_id)


def uniform_subnet(pruner, subnet: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``subnet`` with the spaces of the same layer in every block (``h.0.mlp.c_fc``,
    ``h.1.mlp.c_fc``, ...) keeping the same number of channels: the count nearest their
    mean that the pruner's width rule allows (``round_to``, ``max_ratio``; a mean of
    multiples of 16 need not be one), each space its best channels by the pruner's
    order."""
    from ...pruning.allocation import WidthRule
    groups = pruner.groups.prunable
    rule = getattr(pruner, 'rule', None) or WidthRule()
    classes: Dict[Tuple[str, int], List[str]] = {}
    for gid in subnet:
        classes.setdefault((_layer_pattern(gid), groups[gid].num_channels), []).append(gid)
    counts = {}
    for ids in classes.values():
        count = rule.fit(groups[ids[0]], np.mean([int(subnet[gid].sum()) for gid in ids]))
        counts.update((gid, count) for gid in ids)
    return pruner.subnet_keeping(subnet, counts)


def split_routed_experts(model: nn.Module) -> List[str]:
    """Split ``model``'s fused experts (:func:`razorlib.nn.split_experts`), in place, so
    that each expert's width prunes; the names of the :class:`~razorlib.nn.SplitExperts`
    made.  A layout it does not compute (a gating of its own other than GPT-OSS's) leaves
    every module fused, whole (the trace then names its ``grouped_mm``), and returns no
    name."""
    from ...nn.experts import SplitExperts, split_experts
    try:
        split_experts(model)
    except ValueError:
        return []
    return [name for name, module in model.named_modules() if isinstance(module, SplitExperts)]


#: Fused experts' widths are kept multiples of this (or whole): ``grouped_mm`` needs its
#: operands' rows in multiples of 16 bytes, 8 bf16 values.
EXPERT_WIDTH_MULTIPLE = 8


def uniform_experts(pruner, subnet: Dict[str, torch.Tensor], modules: Sequence[str],
                    meets: Optional[Callable[[Dict[str, torch.Tensor]], bool]] = None
                    ) -> Dict[str, torch.Tensor]:
    """``subnet`` with the experts of each :class:`~razorlib.nn.SplitExperts` named in
    ``modules`` keeping the same number of channels, so that
    :func:`~razorlib.nn.fuse_experts` can stack them into one tensor again; other spaces
    as they are.

    The count is one the pruner's width rule allows (``round_to``, ``max_ratio``) that is
    a multiple of :data:`EXPERT_WIDTH_MULTIPLE` (the kernel that runs fused experts
    needs it) or the full width, each expert keeping its best channels by the pruner's
    order.  Without ``meets`` (a budget of channels or latency) it is the largest such
    count at most the experts' mean, or the smallest there is.  With ``meets`` (whether a
    subnet meets the FLOPs or params budget; FLOPs weigh each expert by the tokens routed
    to it) it starts at the count nearest the mean, and the widest layers' experts (all
    of them when their widths are one, as ``hf.prune``'s are) then go down a count at a
    time until the budget holds.

    Raises:
        ValueError: every layer's experts at their narrowest still miss the budget.
    """
    from ...pruning.allocation import WidthRule
    groups, orders = pruner.groups.prunable, pruner.channel_orders()
    rule = getattr(pruner, 'rule', None) or WidthRule()
    members = {name: [gid for gid in subnet if gid.startswith(f'{name}.experts.')]
               for name in modules}
    members = {name: ids for name, ids in members.items() if ids}
    widths, index = {}, {}
    for name, ids in members.items():
        full = groups[ids[0]].num_channels
        widths[name] = [int(w) for w in rule.allowed(groups[ids[0]])
                        if w % EXPERT_WIDTH_MULTIPLE == 0 or w == full]
        mean = np.mean([int(subnet[gid].sum()) for gid in ids])
        if meets is None:
            index[name] = max([0] + [i for i, w in enumerate(widths[name]) if w <= mean])
        else:
            index[name] = min(range(len(widths[name])),
                              key=lambda i: (abs(widths[name][i] - mean), -widths[name][i]))

    def at_index() -> Dict[str, torch.Tensor]:
        return pruner.subnet_keeping(subnet, {gid: widths[name][index[name]]
                                              for name, ids in members.items()
                                              for gid in ids}, orders)

    kept = at_index()
    while meets is not None and not meets(kept):
        narrower = [name for name in index if index[name] > 0]
        if not narrower:
            raise ValueError('the budget cannot be met with one width for the experts of '
                             f'each layer ({len(index)} layers of experts at their '
                             'narrowest still miss it); ask for a larger budget. Nothing '
                             'was changed.')
        widest = max(widths[name][index[name]] for name in narrower)
        for name in narrower:
            if widths[name][index[name]] == widest:
                index[name] -= 1
        kept = at_index()
    return kept


def describe_slim_config(model: nn.Module, slim: nn.Module, caller: str,
                         hidden: bool, example_inputs: Any = None) -> None:
    """Rewrite ``slim.config`` to describe the slim widths (:func:`~.config.sync_config`)
    and warn, naming the first tensors, where it cannot: ``save_pretrained`` alone would
    then write a config that ``from_pretrained`` cannot load the weights into, and
    :func:`~.reload.save_pruned` is the way to save it.  With ``hidden``, also warn when
    the hidden size was pruned (:func:`warn_if_hidden_pruned`).  The warnings point at
    the call of the ``prune`` that called :func:`~razorlib.pruning.api.slim_copy`.

    With ``example_inputs``, the slim model runs on them before and after the rewrite:
    a model that reads a rewritten field in its forward would compute otherwise, as would
    its reload, so that is refused naming the fields.  (MiniCPM3 divides its logits by
    ``hidden_size / dim_model_base``: :func:`~.config.sync_config` scales
    ``dim_model_base`` with the hidden size, and this check catches a field no such rule
    keeps.)"""
    before = _first_output(slim, example_inputs) if example_inputs is not None else None
    sync = sync_config(slim)
    if before is not None and sync.changed:
        after = _first_output(slim, example_inputs)
        if after.shape != before.shape or \
                not torch.allclose(after, before, rtol=1e-4, atol=1e-5):
            raise ValueError(
                f'{caller}: the slim {type(slim).__name__} reads its config in its forward: '
                f'rewriting {", ".join(f"{k}={v[1]}" for k, v in sync.changed.items())} '
                'changes its outputs, and a reload would compute them so too; prune with '
                'hidden=False, or keep the widths the model code reads')
    if sync.mismatches:
        shown = '; '.join(str(m) for m in sync.mismatches[:3])
        more = f' (and {len(sync.mismatches) - 3} more)' if len(sync.mismatches) > 3 else ''
        if sync.refused:  # widths a config could say, were no value computed from them
            more += ('; a config saying them would reload values no checkpoint holds '
                     '(non-persistent buffers, numbers computed at __init__) otherwise: '
                     + '; '.join(str(m) for m in sync.refused[:3]))
        warn_at_caller(f'{caller}: the slim {type(slim).__name__}\'s config cannot describe '
                       f'{len(sync.mismatches)} of its tensors ({shown}{more}); save it with '
                       'razorlib.integrations.transformers.save_pruned, which writes the '
                       'widths beside the config, not with save_pretrained alone',
                       UserWarning)
    if hidden:
        warn_if_hidden_pruned(model, slim, caller)


def prune(model: nn.Module, example_inputs: Any, ratio: Optional[float] = None,
          pruner: Union[str, dict] = 'L1NormPruner', uniform: bool = True,
          hidden: bool = False, **kwargs: Any) -> nn.Module:
    """A slim copy of a transformers model whose ``config`` describes it.

    :func:`razorlib.prune` with the defaults of the module docstring: the same budgets
    (``ratio``, ``flops``, ``params``, ``latency``), criteria and options, the model
    left untouched, the slim copy run once on ``example_inputs`` and its config
    rewritten; with ``uniform`` the layers repeated down the stack keep one width each.

    Args:
        model: a transformers ``PreTrainedModel``.
        example_inputs: the keyword inputs of one forward (``{'input_ids': ...}``,
            ``{'pixel_values': ...}``).
        ratio: fraction of channels to keep in each prunable group; 0.5 if no budget is
            given.
        pruner: a pruner type registered in ``PRUNERS`` or a config dict.
        uniform: keep the widths of each layer repeated down the stack equal, so the
            config can describe them (their mean over a sampled subnet, as
            ``round_to`` allows).  A budget met by one ratio for every group gives such
            widths already; ``global_ranking``
            and ``sensitivity``, which give every layer its own width, need
            ``uniform=False`` (then save with
            :func:`~razorlib.integrations.transformers.save_pruned`).
        hidden: also prune the hidden size where the tracer finds it prunable (outputs
            change beyond the pruned channels' share: the norms' statistics are taken
            over fewer channels; a warning says so when it happens).
        **kwargs: :func:`razorlib.prune`'s other keyword arguments (``flops``,
            ``importance``, ``data``, ...) and pruner arguments (``except_start_keys``,
            ``strict``, ``gqa``).

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> llama = LlamaForCausalLM(LlamaConfig(
        ...     hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=50))
        >>> slim = prune(llama, {'input_ids': torch.randint(0, 50, (1, 8))}, ratio=0.25)
        >>> slim.config.intermediate_size, slim.model.layers[1].mlp.up_proj.out_features
        (16, 16)
    """
    from ...pruning.api import PRUNE_DEFAULTS, slim_copy  # pruning loads this module lazily
    if not is_hf_model(model):
        raise TypeError(f'razorlib.integrations.transformers.prune takes a transformers '
                        f'PreTrainedModel, got a {type(model).__name__}; use razorlib.prune')
    call = dict(ratio=ratio, pruner=pruner, hidden=hidden)
    call.update((key, kwargs.pop(key)) for key in list(kwargs) if key in PRUNE_DEFAULTS)
    if uniform and (call.get('global_ranking')
                    or call.get('sensitivity', False) not in (False, None)):
        raise ValueError('razorlib.integrations.transformers.prune: global_ranking= and '
                         'sensitivity= give every layer its own width, and uniform=True '
                         'keeps one width per layer repeated down the stack; pass '
                         'uniform=False and save with save_pruned')
    return slim_copy(model, example_inputs, call, kwargs,
                     reshape=uniform_subnet if uniform else None,
                     caller='razorlib.integrations.transformers.prune')


def _first_output(model: nn.Module, example_inputs: Any) -> torch.Tensor:
    """The first tensor a transformers model returns on ``example_inputs`` (its logits or
    last hidden state), in eval mode without gradients."""
    with evaluating(model), torch.no_grad():
        output = call_model(model, example_inputs)
    values = output.to_tuple() if hasattr(output, 'to_tuple') else output
    while isinstance(values, (tuple, list)):
        values = values[0]
    return values
