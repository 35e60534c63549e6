# A four-layer conv net for 16x16 digits: 16x16 -> 8x8 -> 4x4, ten classes.
model = dict(
    type='ImageClassifier',
    backbone=dict(type='PlainCNN', channels=(32, 64, 64, 128), strides=(1, 2, 1, 2)),
    head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))
