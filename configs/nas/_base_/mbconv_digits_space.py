# The MobileNet MBConv search space sized for the 16x16 digits: three stages, every block
# searching its kernel (3/5/7) and expand ratio (3/6), all but the first block of a stage
# skippable.
architecture = dict(
    type='ImageClassifier',
    backbone=dict(
        type='SearchableMobileNet',
        arch_setting=[(16, 2, 2), (24, 3, 2), (48, 2, 1)],
        stem_channels=16,
        first_channels=8,
        last_channels=None,
        kernel_sizes=(3, 5, 7),
        expand_ratios=(3, 6),
        skip=True,
        stem='cifar'),
    head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))
