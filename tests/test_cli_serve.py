"""``workbench serve``: loopback by default, refuses to expose the app without authentication."""

from __future__ import annotations

import pytest

from workbench.cli import build_parser, main
from workbench.cli.serve import ServeError, auth_kwargs, is_loopback


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("10.1.2.3", False), ("::", False),
])
def test_is_loopback(address: str, expected: bool) -> None:
    assert is_loopback(address) is expected


def _args(*argv: str):  # noqa: ANN202
    return build_parser().parse_args(["serve", *argv])


def test_defaults_bind_localhost() -> None:
    args = _args()
    assert (args.address, args.port) == ("127.0.0.1", 5006)
    assert auth_kwargs(args) == {}


def test_exposed_without_auth_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ServeError, match="authentication"):
        auth_kwargs(_args("--address", "0.0.0.0"))
    assert main(["serve", "--address", "0.0.0.0"]) == 2
    assert "authentication" in capsys.readouterr().err


def test_exposed_with_basic_auth_or_oauth() -> None:
    kw = auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", "pw",
                           "--cookie-secret", "s3cret"))
    assert kw == {"basic_auth": "pw", "cookie_secret": "s3cret"}
    with pytest.raises(ServeError, match="cookie-secret"):
        auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", "pw"))
    with pytest.raises(ServeError, match="oauth-key"):
        auth_kwargs(_args("--address", "0.0.0.0", "--oauth-provider", "github"))
    kw = auth_kwargs(_args("--address", "0.0.0.0", "--oauth-provider", "github",
                           "--oauth-key", "k", "--oauth-secret", "s", "--cookie-secret", "c"))
    assert kw["oauth_provider"] == "github"
