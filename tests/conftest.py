import pytest


@pytest.fixture(autouse=True)
def _private_verdict_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the user's verdict cache."""
    monkeypatch.setenv(
        "DFLASH2_BACKPORT_CACHE_DIR", str(tmp_path_factory.mktemp("verdicts"))
    )
