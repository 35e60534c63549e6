"""Head attributes: the integers an attention module's code sizes its heads with.

Pruning whole heads narrows an attention module's projections, but its code may still
split them with numbers it keeps as attributes: timm's
``qkv.reshape(B, N, 3, self.num_heads, self.head_dim)``, GPT-2's
``c_attn(x).split(self.split_size, 2)``.  Each :class:`HeadAttributes` in the
``HEAD_ATTRIBUTES`` registry recognises such modules by their attributes (Hugging Face
families share their names: ``num_attention_heads`` and ``attention_head_size`` for
BERT-likes, ``head_dim`` and ``num_key_value_groups`` for Llama-likes) and recomputes
them from the projections' widths after slicing (``pruning/slicing.py``).  ``head_dim``
itself changes only when every head keeps the same positions (``heads='width'``,
which slicing tells from the kept indices): then :meth:`HeadAttributes.update_width`
keeps the head counts and rewrites ``head_dim`` (and widths such as
``all_head_size``); a precomputed ``scaling`` stays dense, as the masked model
computes it.

Example:
    >>> import torch.nn as nn
    >>> class Attention(nn.Module):  # timm's layout
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.num_heads, self.head_dim = 4, 8
    ...         self.qkv = nn.Linear(32, 96)
    >>> attn = Attention()
    >>> attn.qkv = nn.Linear(32, 48)  # two heads pruned
    >>> spec = head_attributes_of(attn)
    >>> spec.update(attn), attn.num_heads
    ({'num_heads': 2}, 2)
"""
from typing import Dict, Optional, Tuple

import torch.nn as nn

from ..registry import HEAD_ATTRIBUTES
from .table import KindTable

__all__ = ['ConfigView', 'HeadAttributes', 'head_attributes_of']


class HeadAttributes:
    """Which attributes of an attention module count its heads, and from which child.

    Class attributes (override them in a subclass and register it):
        query: the child that computes the queries (a Linear or Conv1D).
        parts: how many equal parts its output holds (3 for a fused q/k/v projection).
        key: the child that computes the keys, when key/value heads may differ (GQA).
        output: the child whose input is the query width, where ``query`` computes
            queries, keys and values of unequal widths (a fused projection under GQA):
            the keys and values share the rest of its output.
        head_dim: the attribute holding the width of one head.
        heads: attributes set to the number of query heads (those the module has).
        kv_heads: attributes set to the number of key/value heads.
        groups: attributes set to query heads per key/value head.
        widths: attributes set to the width of all query heads (``heads * head_dim``).
        kv_widths: attributes set to the width of all key/value heads.
    """
    query: str = 'q_proj'
    parts: int = 1
    key: Optional[str] = None
    output: Optional[str] = None
    head_dim: str = 'head_dim'
    heads: Tuple[str, ...] = ()
    kv_heads: Tuple[str, ...] = ()
    groups: Tuple[str, ...] = ()
    widths: Tuple[str, ...] = ()
    kv_widths: Tuple[str, ...] = ()

    def matches(self, module: nn.Module) -> bool:
        """Whether ``module`` has this layout: a query child, and a head width or a head
        count (timm's ``WindowAttention`` keeps ``num_heads`` only and reshapes with
        ``-1``)."""
        counted = any(isinstance(getattr(module, name, None), int)
                      for name in (self.head_dim, ) + self.heads)
        return counted and isinstance(getattr(module, self.query, None), nn.Module) and \
            (self.key is None or isinstance(getattr(module, self.key, None), nn.Module))

    def head_width(self, module: nn.Module, kinds: Optional[KindTable] = None) -> int:
        """The width of one head: the ``head_dim`` attribute, else the query width over
        the head count (read before slicing).

        Example:
            >>> attn = nn.Module()
            >>> attn.num_heads, attn.qkv = 4, nn.Linear(32, 96)
            >>> FusedQKVHeads().head_width(attn)
            8
        """
        head_dim = getattr(module, self.head_dim, None)
        if isinstance(head_dim, int):
            return head_dim
        count = next(getattr(module, name) for name in self.heads
                     if isinstance(getattr(module, name, None), int))
        return self.widths_of(module, kinds or KindTable())[0] // count

    def widths_of(self, module: nn.Module, kinds: KindTable) -> Tuple[int, Optional[int]]:
        """``(query width, key width)`` of ``module`` as it is now: the query child's
        output over ``parts``, the key child's output (None without one); with an
        ``output`` child, its input and half the rest of the query child's output."""
        if self.output is not None:
            output = getattr(module, self.output)
            queries = kinds.kind_of(output).widths(output)['in']
            return queries, (_out_width(kinds, getattr(module, self.query)) - queries) // 2
        width = _out_width(kinds, getattr(module, self.query)) // self.parts
        return width, None if self.key is None else _out_width(kinds, getattr(module, self.key))

    def update(self, module: nn.Module, kinds: Optional[KindTable] = None,
               head_dim: Optional[int] = None) -> Dict[str, int]:
        """Set the head counts from the children's current widths, heads of ``head_dim``
        (default the attribute; :meth:`head_width` before slicing for a module without
        one); returns what it set."""
        kinds = kinds or KindTable()
        head_dim = getattr(module, self.head_dim) if head_dim is None else head_dim
        width, keys = self.widths_of(module, kinds)
        values = {name: width // head_dim for name in self.heads}
        values.update({name: width for name in self.widths})
        if keys is not None:
            kv = keys // head_dim
            values.update({name: kv for name in self.kv_heads})
            values.update({name: width // head_dim // max(kv, 1) for name in self.groups})
            values.update({name: keys for name in self.kv_widths})
        values = {name: value for name, value in values.items()
                  if isinstance(getattr(module, name, None), int)}
        for name, value in values.items():
            setattr(module, name, value)
        return values

    def attributes(self, module: nn.Module) -> Dict[str, int]:
        """The integer attributes this layout may set, as they are now."""
        names = (self.head_dim, ) + self.heads + self.kv_heads + self.groups + self.widths + \
            self.kv_widths
        return {name: getattr(module, name) for name in names
                if isinstance(getattr(module, name, None), int)}

    def head_count(self, module: nn.Module, kinds: Optional[KindTable] = None) -> int:
        """Query heads of ``module`` as it is: its query width over ``head_dim``."""
        return self.widths_of(module, kinds or KindTable())[0] // self.head_width(module, kinds)

    def update_width(self, module: nn.Module, heads: int, attributes: Dict[str, int],
                     kinds: Optional[KindTable] = None) -> Dict[str, int]:
        """After the projections were sliced to a narrower ``head_dim`` (every head alike):
        put back ``attributes`` (from :meth:`attributes` before slicing, so the head
        counts stay), then set ``head_dim`` to the query width over ``heads`` and the
        width attributes to the query width.  Returns what it set after putting back.

        Raises:
            ValueError: the query or key width is no multiple of the new ``head_dim``.

        Example:
            >>> attn = nn.Module()
            >>> attn.head_dim, attn.num_key_value_groups = 16, 2
            >>> attn.q_proj, attn.k_proj = nn.Linear(8, 64), nn.Linear(8, 32)
            >>> spec = SeparateProjectionHeads()
            >>> before, heads = spec.attributes(attn), spec.head_count(attn)
            >>> attn.q_proj, attn.k_proj = nn.Linear(8, 32), nn.Linear(8, 16)  # sliced
            >>> spec.update_width(attn, heads, before), attn.num_key_value_groups
            ({'head_dim': 8}, 2)
        """
        kinds = kinds or KindTable()
        width, keys = self.widths_of(module, kinds)
        keys = width if keys is None else keys
        head_dim = width // max(heads, 1)
        if not head_dim or width % heads or keys % head_dim:
            raise ValueError(f'{type(module).__name__}: {width} query and {keys} key channels '
                             f'are not {heads} query heads of one head_dim')
        for name, value in attributes.items():
            setattr(module, name, value)
        values = {self.head_dim: head_dim, **{name: width for name in self.widths},
                  **{name: keys for name in self.kv_widths}}
        values = {name: value for name, value in values.items()
                  if isinstance(getattr(module, name, None), int)}
        for name, value in values.items():
            setattr(module, name, value)
        return values


def _out_width(kinds: KindTable, child: nn.Module) -> int:
    kind = kinds.kind_of(child)
    if kind is None or 'out' not in kind.axes:
        raise ValueError(f'a {type(child).__name__} has no output channels razorlib knows')
    return kind.widths(child)['out']


@HEAD_ATTRIBUTES.register_module()
class SeparateProjectionHeads(HeadAttributes):
    """Llama, Qwen2, Mistral, Hugging Face ViT: ``q_proj``/``k_proj`` and ``head_dim``."""
    key = 'k_proj'
    heads = ('num_heads', 'num_attention_heads')
    kv_heads = ('num_key_value_heads', 'num_kv_heads')
    groups = ('num_key_value_groups', )
    widths = ('all_head_size', )


@HEAD_ATTRIBUTES.register_module()
class BertHeads(HeadAttributes):
    """BERT-likes (RoBERTa, DeiT, ...): ``query`` and ``attention_head_size``."""
    query = 'query'
    head_dim = 'attention_head_size'
    heads = ('num_attention_heads', )
    widths = ('all_head_size', )


@HEAD_ATTRIBUTES.register_module()
class FusedQKVHeads(HeadAttributes):
    """timm's ``Attention``, torchvision-style ``qkv``: one projection for q, k and v."""
    query = 'qkv'
    parts = 3
    heads = ('num_heads', )


@HEAD_ATTRIBUTES.register_module()
class GPT2Heads(HeadAttributes):
    """GPT-2's ``c_attn`` (a Conv1D of q, k and v) split by ``split_size``; GPTBigCode's
    without multi-query attention too (its multi-query one is :class:`GPTBigCodeHeads`')."""
    query = 'c_attn'
    parts = 3
    heads = ('num_heads', )
    widths = ('split_size', )

    def matches(self, module: nn.Module) -> bool:
        return super().matches(module) and not getattr(module, 'is_cross_attention', False) \
            and not getattr(module, 'multi_query', False)


class ConfigView:
    """A model's config as one layer sees it: fields of the layer's own over the config
    every layer shares.

    Phi-3's attention reads its query head count from ``self.config`` in its forward, so
    a layer pruned to its own head count needs a config that says it; a copy would also
    freeze every other field, and changes made later to the shared config
    (``set_attn_implementation``, a quantizer's marks, a rewritten width) would not reach
    the layer.  Reads of other fields, and writes to them, go to the shared config.

    Example:
        >>> from types import SimpleNamespace
        >>> shared = SimpleNamespace(num_attention_heads=4, attn='sdpa')
        >>> view = ConfigView(shared, num_attention_heads=2)
        >>> shared.attn = 'eager'
        >>> view.num_attention_heads, view.attn, shared.num_attention_heads
        (2, 'eager', 4)
    """

    def __init__(self, shared: object, **own: object):
        self.__dict__.update(own, _shared=shared)

    @staticmethod
    def shared_of(config: object) -> object:
        """The config every layer shares: ``config`` itself unless it is a view."""
        return config._shared if isinstance(config, ConfigView) else config

    def __getattr__(self, name: str) -> object:
        # dunders stay the view's own (``copy`` and ``pickle`` look up ``__deepcopy__``,
        # ``__setstate__`` on the instance, the latter before ``_shared`` is restored)
        if name.startswith('__') or '_shared' not in self.__dict__:
            raise AttributeError(name)
        return getattr(self._shared, name)

    def __setattr__(self, name: str, value: object) -> None:
        if name in self.__dict__:
            self.__dict__[name] = value
        else:
            setattr(self._shared, name, value)

    def __repr__(self) -> str:
        own = ', '.join(f'{k}={v!r}' for k, v in self.__dict__.items() if k != '_shared')
        return f'ConfigView({type(self._shared).__name__}, {own})'


@HEAD_ATTRIBUTES.register_module()
class Phi3Heads(HeadAttributes):
    """Phi-3's fused ``qkv_proj``: queries, keys and values of unequal widths
    (grouped-query attention), cut at ``self.config.num_attention_heads * head_dim``
    (read in the forward) and then ``num_key_value_heads * head_dim``.  The query width
    is ``o_proj``'s input, the keys and values share the rest.  ``config`` is the
    model's, shared by every layer, so a pruned layer gets a :class:`ConfigView` of it
    that says its own query head count.

    Example:
        >>> from types import SimpleNamespace
        >>> attn = nn.Module()
        >>> attn.config = SimpleNamespace(num_attention_heads=4)
        >>> attn.head_dim, attn.num_key_value_heads, attn.num_key_value_groups = 8, 2, 2
        >>> attn.qkv_proj, attn.o_proj = nn.Linear(32, 64), nn.Linear(32, 32)
        >>> shared = attn.config
        >>> attn.qkv_proj, attn.o_proj = nn.Linear(32, 32), nn.Linear(16, 32)  # a kv head
        >>> spec = head_attributes_of(attn)
        >>> type(spec).__name__, spec.update(attn)
        ('Phi3Heads', {'num_key_value_heads': 1, 'num_key_value_groups': 2, \
'config.num_attention_heads': 2})
        >>> shared.num_attention_heads, attn.config.num_attention_heads
        (4, 2)
    """
    query = 'qkv_proj'
    output = 'o_proj'
    kv_heads = ('num_key_value_heads', )
    groups = ('num_key_value_groups', )

    def matches(self, module: nn.Module) -> bool:
        return (super().matches(module) and isinstance(getattr(module, 'o_proj', None), nn.Module)
                and isinstance(getattr(getattr(module, 'config', None), 'num_attention_heads',
                                       None), int))

    def update(self, module: nn.Module, kinds: Optional[KindTable] = None,
               head_dim: Optional[int] = None) -> Dict[str, int]:
        """:meth:`HeadAttributes.update`, and the query head count in the module's
        :class:`ConfigView` of the shared config."""
        values = super().update(module, kinds, head_dim)
        head_dim = getattr(module, self.head_dim) if head_dim is None else head_dim
        heads = self.widths_of(module, kinds or KindTable())[0] // head_dim
        if module.config.num_attention_heads != heads:
            module.config = ConfigView(ConfigView.shared_of(module.config),
                                       num_attention_heads=heads)
            values['config.num_attention_heads'] = heads
        return values


@HEAD_ATTRIBUTES.register_module()
class GPTBigCodeHeads(HeadAttributes):
    """GPTBigCode's (StarCoder's) multi-query ``c_attn``: the queries, then one key and one
    value head, cut by ``split((self.embed_dim, self.kv_dim, self.kv_dim))`` in the
    forward.  The query width is ``c_proj``'s input and sets ``embed_dim`` (the split's
    first size, no longer the hidden size) and ``split_size``; ``kv_dim`` is the rest
    over two; ``num_key_value_groups`` (read by ``repeat_kv``) follows the query heads."""
    query = 'c_attn'
    output = 'c_proj'
    heads = ('num_heads', )
    kv_heads = ('kv_heads', )
    groups = ('num_key_value_groups', )
    widths = ('embed_dim', 'split_size')
    kv_widths = ('kv_dim', )

    def matches(self, module: nn.Module) -> bool:
        return super().matches(module) and getattr(module, 'multi_query', False) is True \
            and isinstance(getattr(module, 'kv_dim', None), int) \
            and isinstance(getattr(module, self.output, None), nn.Module)


def head_attributes_of(module: nn.Module) -> Optional[HeadAttributes]:
    """The first registered :class:`HeadAttributes` that matches ``module``, or None."""
    for cls in HEAD_ATTRIBUTES.module_dict.values():
        spec = cls()
        if spec.matches(module):
            return spec
    return None
