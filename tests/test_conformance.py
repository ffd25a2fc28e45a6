"""skip_reason: every reason a case does not apply to a backend names its cause."""

from normbench.check.conformance import skip_reason
from normbench.core.cases import Case
from tests.mutants import Fp32Kernel


class Capped(Fp32Kernel):
    name = "capped"
    device = "a slow simulator"
    max_elements = 1000


def test_max_elements_skips_larger_cases_and_says_why():
    backend = Capped()
    assert skip_reason(backend, Case("rows", (1, 1000), (1000,), "float32")) is None
    reason = skip_reason(backend, Case("rows", (3, 1000), (1000,), "float32"), backward=True)
    assert reason == ("case has 3,000 elements, more than backend 'capped' affords on a slow simulator "
                      "(max_elements = 1,000)")


def test_no_limit_by_default():
    assert Fp32Kernel.max_elements is None
    assert skip_reason(Fp32Kernel(), Case("rows", (65537, 8), (8,), "float32")) is None
