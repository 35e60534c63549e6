# SPOS's ShuffleNetV2 search space sized for the 16x16 digits: a stride-1 stem, three
# stages (16x16 -> 8x8 -> 4x4 -> 2x2) whose first block is a fixed 3x3 downsampling block
# and whose other seven blocks are each one of shuffle_3x3 / 5x5 / 7x7 / xception:
# 4^7 = 16,384 subnets.  With searched downsampling blocks, every path would give the
# head its own channels and the supernet would take many more epochs to learn
# (docs/nas.md, "Search spaces").
architecture = dict(
    type='ImageClassifier',
    backbone=dict(
        type='SearchableShuffleNetV2',
        arch_setting=[(32, 3, 2), (64, 4, 2), (128, 3, 2)],
        stem_channels=16,
        last_channels=None,
        stem='cifar',
        downsample='shuffle_3x3'),
    head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))
