"""Hugging Face transformers models: prune with HF defaults, rewrite the config to the
slim widths, drop decoder layers, save and reload (``docs/transformers.md``).

Nothing here imports transformers until a function needs it, and ``import razorlib``
never imports this package.
"""
from .config import (MLP_RATIO_FIELDS, MLP_WIDTH_FIELDS, ConfigSync, Mismatch,
                     buffer_mismatches, build_like, head_shapes_differ, is_hf_model,
                     number_mismatches, sync_config)
from .depth import decoder_layers, prune_decoder_layers, remove_decoder_layers
from .prune import hidden_size_keys, prune, uniform_subnet, warn_whole_attention
from .reload import (CHANNELS_FILE, HEAD_WIDTHS_FILE, load_pruned, save_pruned,
                     widths_channel_configs)
from .streaming import slim_checkpoint

__all__ = [
    'MLP_RATIO_FIELDS', 'MLP_WIDTH_FIELDS', 'ConfigSync', 'Mismatch', 'buffer_mismatches',
    'build_like', 'head_shapes_differ', 'is_hf_model', 'number_mismatches', 'sync_config',
    'decoder_layers', 'prune_decoder_layers', 'remove_decoder_layers', 'hidden_size_keys',
    'prune', 'uniform_subnet', 'warn_whole_attention', 'CHANNELS_FILE', 'HEAD_WIDTHS_FILE',
    'load_pruned', 'save_pruned', 'widths_channel_configs', 'slim_checkpoint',
]
