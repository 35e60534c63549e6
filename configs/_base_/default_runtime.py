# Runtime defaults of every razorlib config.
default_scope = 'razorlib'

default_hooks = dict(
    runtime_info=dict(type='RuntimeInfoHook'),
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    # Seeds the global RNGs per epoch (per batch in an IterBasedTrainLoop), so a run
    # resumed from an epoch checkpoint (an iteration one, iteration-based) repeats an
    # uninterrupted one.
    epoch_seed=dict(type='EpochSeedHook'),
)

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),  # tools/train.py starts gloo itself on CPU machines
)

randomness = dict(seed=0)
log_level = 'INFO'
load_from = None
resume = False
