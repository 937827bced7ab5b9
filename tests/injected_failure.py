"""A test that fails, run only by `make test FAIL_STAGE=<stage>` (not named test_*.py,
so no stage collects it otherwise): tests/unit/test_make.py checks that make test goes
on past a failed stage and reports it."""


def test_injected_failure():
    raise AssertionError("injected by make FAIL_STAGE (tests/injected_failure.py)")
