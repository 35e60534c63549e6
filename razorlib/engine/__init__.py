"""mmengine components of razorlib, registered in its registries (``LOOPS``, ...)."""
from .loops import EvolutionSearchLoop, GreedySearchLoop, SubnetValLoop

__all__ = ['EvolutionSearchLoop', 'GreedySearchLoop', 'SubnetValLoop']
