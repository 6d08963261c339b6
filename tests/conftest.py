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


@pytest.fixture(autouse=True, scope="session")
def summaries_match_their_schema():
    """Every summary a test has ckptscan write (``Result.to_json``: ``analyze`` and the remote
    path write summary.json with it) must validate against ``ckptscan/report/schema.json``: a
    verdict field or value the schema does not know (a new test or shape of an alarm) makes a
    stored result that cannot be opened again, and this finds it on the synthetic runs of the
    suite rather than on a user's."""
    import json

    from ckptscan import api
    from ckptscan.report.schema import validate

    plain = api.Result.to_json

    def checked(self) -> str:
        text = plain(self)
        problems = validate(json.loads(text))
        assert not problems, f"summary does not match its schema: {problems[:3]}"
        return text

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api.Result, "to_json", checked)
        yield
