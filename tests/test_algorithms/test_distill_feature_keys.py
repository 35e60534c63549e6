"""SingleTeacherDistill's ``features`` entries: a misspelled key, a missing module name
or a dict given for the list is refused naming the entry, not dropped or failed on
bare."""
import pytest
import torch

from pruning_helpers import tiny_classifier
from razorlib.algorithms import SingleTeacherDistill


def distill(**kwargs) -> SingleTeacherDistill:
    torch.manual_seed(0)
    return SingleTeacherDistill(architecture=tiny_classifier((4, 8)), teacher=tiny_classifier(),
                                input_shape=(3, 16, 16), **kwargs)


def test_a_misspelled_weight_is_refused_not_distilled_at_weight_one():
    # 'weigth' was dropped silently: the pair was distilled at weight 1.0, ten times the
    # weight the config meant
    with pytest.raises(ValueError, match=r"^SingleTeacherDistill: features\[1\]: unknown key "
                       r"'weigth' \(closest: weight\); an entry takes student, teacher and "
                       r'weight$'):
        distill(features=[dict(student='backbone', teacher='backbone'),
                          dict(student='neck', teacher='neck', weigth=0.1)])


@pytest.mark.parametrize('entry, error, message', [
    (dict(teacher='neck'), ValueError, r"features\[0\]: no 'student': give the name of the "
     'student module'),
    (dict(student='neck', techer='neck'), ValueError,
     r"features\[0\]: unknown key 'techer' \(closest: teacher\)"),
    (dict(student='neck'), ValueError, r"features\[0\]: no 'teacher'"),
    (dict(student=3, teacher='neck'), TypeError,
     r'features\[0\]\.student must be a module name \(a string\), got 3'),
    ('neck', TypeError, r"features\[0\] must be a dict\(student=<module name>, "
     r"teacher=<module name>\[, weight=<float>\]\), got 'neck'"),
])
def test_an_entry_must_name_both_modules_and_nothing_else(entry, error, message):
    with pytest.raises(error, match=f'^SingleTeacherDistill: {message}'):
        distill(features=[entry])


def test_one_dict_given_for_the_list_is_refused():
    with pytest.raises(TypeError, match=r'^SingleTeacherDistill: features must be a list of '
                       r'dict\(student=.*got dict'):
        distill(features=dict(student='neck', teacher='neck'))


def test_entries_given_right_keep_their_weights():
    model = distill(features=[dict(student='neck', teacher='neck', weight=0.25),
                              dict(student='backbone', teacher='backbone')])
    assert model.features == [dict(student='neck', teacher='neck', weight=0.25),
                              dict(student='backbone', teacher='backbone', weight=1.0)]
    assert len(model.connectors) == 2
