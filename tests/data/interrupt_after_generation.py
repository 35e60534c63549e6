"""InterruptAfterGenerationHook: send the search process SIGINT once a generation's state
is saved, as Ctrl-C would, at a known point (not at whatever moment a test's timer
fires, which may come after a fast search has ended).

Python turns SIGINT into ``KeyboardInterrupt`` only where the signal was not ignored
when the interpreter started; a job started in the background by a non-interactive
shell (``.ci/run &``) inherits SIGINT ignored.  A terminal's Ctrl-C never meets that,
so the hook puts Python's own handler back before it signals."""
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
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
