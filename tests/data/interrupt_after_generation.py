"""InterruptAfterGenerationHook: send the search process SIGINT once a generation's state
is saved, as Ctrl-C would, at a known point (not at whatever moment a test's timer
fires, which may come after a fast search has ended)."""
import os
import signal

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class InterruptAfterGenerationHook(Hook):
    priority = 'LOWEST'

    def __init__(self, generation: int):
        self.generation = generation

    def after_search_step(self, runner, step: int, best) -> None:
        if step == self.generation:
            os.kill(os.getpid(), signal.SIGINT)
