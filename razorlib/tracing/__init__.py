"""Tracing: one forward + pseudo loss, an autograd walk, and channel groups."""
from .channels import TensorChannels
from .context import ChannelUse, TracingError
from .groups import ChannelGroup, ChannelGroups, build_groups
from .rules import RULES, Rule, rule_for
from .slots import FrozenReason
from .tracer import ChannelGraph, trace

__all__ = [
    'ChannelGraph', 'ChannelGroup', 'ChannelGroups', 'ChannelUse', 'FrozenReason', 'RULES',
    'Rule', 'TensorChannels', 'TracingError', 'build_groups', 'rule_for', 'trace'
]
