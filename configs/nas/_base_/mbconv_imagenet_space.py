# A MobileNet MBConv search space at ImageNet scale (ProxylessNAS-like layout): every
# block searches its kernel (3/5/7) and expand ratio (3/6); all but the first block of a
# stage may be skipped.
architecture = dict(
    type='ImageClassifier',
    backbone=dict(
        type='SearchableMobileNet',
        arch_setting=[(24, 4, 2), (40, 4, 2), (80, 4, 2), (96, 4, 1), (192, 4, 2), (320, 1, 1)],
        stem_channels=32,
        first_channels=16,
        last_channels=1280,
        kernel_sizes=(3, 5, 7),
        expand_ratios=(3, 6),
        skip=True,
        stem='imagenet'),
    head=dict(type='LinearClsHead', num_classes=1000),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.485, 0.456, 0.406],
                           std=[0.229, 0.224, 0.225]))
