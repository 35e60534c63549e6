"""KillAfterEpochHook: SIGKILL the training process once an epoch's checkpoint is saved,
as a crash or a pre-empted job would, to test resuming."""
import os
import signal

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class KillAfterEpochHook(Hook):
    priority = 'LOWEST'  # after CheckpointHook (VERY_LOW) wrote the checkpoint

    def __init__(self, epoch: int):
        self.epoch = epoch

    def after_train_epoch(self, runner) -> None:
        if runner.epoch + 1 == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)
