"""A stand-in for another OpenMMLab project: its own registry scope and classifier."""
