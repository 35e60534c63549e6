# SPOS's ShuffleNetV2 search space at ImageNet scale (Guo et al., 2020): 20 choice blocks
# (3x3 / 5x5 / 7x7 / xception), widths 64-160-320-640, a 1x1 conv to 1024; 4^20 subnets.
architecture = dict(
    type='ImageClassifier',
    backbone=dict(
        type='SearchableShuffleNetV2',
        arch_setting=[(64, 4, 2), (160, 4, 2), (320, 8, 2), (640, 4, 2)],
        stem_channels=16,
        last_channels=1024,
        stem='imagenet'),
    head=dict(type='LinearClsHead', num_classes=1000),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.485, 0.456, 0.406],
                           std=[0.229, 0.224, 0.225]))
