# AutoSlim supernet of MobileNetV2 1.5x on ImageNet (8 GPUs x 128 images), as in the
# paper; its subnets span roughly 200M to 660M FLOPs.
#   bash: torchrun --nproc_per_node 8 tools/train.py <this config> --launcher pytorch
_base_ = [
    '../../_base_/models/mobilenetv2_imagenet.py',
    '../../_base_/datasets/imagenet.py',
    '../../_base_/schedules/imagenet_sgd_poly_300e.py',
    '../../_base_/default_runtime.py',
]

architecture = _base_.model

model = dict(
    _delete_=True,
    type='AutoSlim',
    architecture=architecture,
    pruner=dict(type='RatioPruner'),
    num_random_samples=2,
    input_shape=(3, 224, 224))

model_wrapper_cfg = dict(type='razorlib.AutoSlimDDP')
train_dataloader = dict(batch_size=128)

custom_hooks = [
    dict(type='ResourceEstimatorHook'),
    dict(type='DumpSubnetHook'),
]
