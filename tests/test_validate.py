"""tfbook.validate: accepted types and the messages that name the argument."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from tfbook import validate


def test_positive_int():
    assert validate.positive_int("n", np.int64(4)) == 4 and validate.positive_int("k", 0, 0) == 0
    for bad in (0, 2.0, True, "3", None):
        with pytest.raises(ValueError, match=r"n must be an int >= 1"):
            validate.positive_int("n", bad)


def test_real():
    assert validate.real("x", Fraction(1, 4)) == 0.25 and validate.real("x", np.float32(2)) == 2.0
    with pytest.raises(ValueError, match="eta must be > 0"):
        validate.real("eta", 0, low=0, low_open=True)
    with pytest.raises(ValueError, match="p must be <= 1"):
        validate.real("p", 1.5, high=1)
    for bad in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="x must be a finite real"):
            validate.real("x", bad)


def test_choice_and_tensor():
    assert validate.choice("kind", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"kind must be one of \('a', 'b'\)"):
        validate.choice("kind", "c", ("a", "b"))
    t = validate.tensor("X", [[0.0, 1.0]], shape=(None, 2), low=0, high=1)
    assert t.dtype == torch.float64
    with pytest.raises(ValueError, match=r"X must have shape \(\*, 3\)"):
        validate.tensor("X", t, shape=(None, 3))
    with pytest.raises(ValueError, match="X must have every entry <= 0.5"):
        validate.tensor("X", t, high=0.5)
    with pytest.raises(ValueError, match="finite"):
        validate.tensor("X", [float("nan")])
