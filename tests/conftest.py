"""Suite-wide: the tests run outside GitHub Actions whatever runs them (under it, ckptscan prints
annotations on stdout/stderr and appends to the runner's job summary file; the tests that check
that set the variables themselves)."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def not_under_github_actions():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("GITHUB_ACTIONS", raising=False)
        mp.delenv("GITHUB_STEP_SUMMARY", raising=False)
        yield
