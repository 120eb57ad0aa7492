"""``workbench serve``: loopback by default, refuses to expose the app without authentication."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from workbench.cli import build_parser, main
from workbench.cli.serve import ServeError, auth_kwargs, is_loopback, tls_kwargs


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


PASSWORD = "a long passphrase"
SECRET = "x" * 32


def test_exposed_with_basic_auth_or_oauth() -> None:
    kw = auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", PASSWORD,
                           "--cookie-secret", SECRET))
    assert kw == {"basic_auth": PASSWORD, "cookie_secret": SECRET}
    with pytest.raises(ServeError, match="cookie-secret"):
        auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", PASSWORD))
    with pytest.raises(ServeError, match="oauth-key"):
        auth_kwargs(_args("--address", "0.0.0.0", "--oauth-provider", "github"))
    kw = auth_kwargs(_args("--address", "0.0.0.0", "--oauth-provider", "github",
                           "--oauth-key", "k", "--oauth-secret", "s", "--cookie-secret", SECRET))
    assert kw["oauth_provider"] == "github"


@pytest.mark.parametrize("flags, message", [
    (["--basic-auth", "users.json"], r"users.json: no such credentials file"),
    (["--basic-auth", "x"], r"the password has 1 characters; use at least 12"),
    (["--basic-auth", "elevenchars"], r"use at least 12"),
    (["--basic-auth", PASSWORD, "--cookie-secret", "c"], r"--cookie-secret has 1 bytes"),
    (["--oauth-provider", "github", "--oauth-key", "k", "--oauth-secret", "s",
      "--cookie-secret", "short"], r"--cookie-secret has 5 bytes"),
    (["--basic-auth", PASSWORD, "--certfile", "c.pem"], r"--certfile and --keyfile go together"),
    (["--basic-auth", PASSWORD, "--certfile", "nope.pem", "--keyfile", "nope.key"],
     r"--certfile nope.pem: no such file"),
])
def test_weak_or_missing_credentials_are_refused(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["serve", "--address", "0.0.0.0", *flags]
    if "--cookie-secret" not in flags and "--basic-auth" in flags:
        argv += ["--cookie-secret", SECRET]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert __import__("re").search(message, err), err


def test_credentials_file(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"ana": PASSWORD, "bo": "short"}))
    with pytest.raises(ServeError, match=r"passwords of \['bo'\] are shorter than 12"):
        auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", str(users),
                          "--cookie-secret", SECRET))
    users.write_text(json.dumps({"ana": PASSWORD}))
    kw = auth_kwargs(_args("--address", "0.0.0.0", "--basic-auth", str(users),
                           "--cookie-secret", SECRET))
    assert kw["basic_auth"] == str(users)
    users.write_text("[1, 2]")
    with pytest.raises(ServeError, match="expected a JSON object"):
        auth_kwargs(_args("--basic-auth", str(users), "--cookie-secret", SECRET))


def test_tls_pair_is_checked(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    with pytest.raises(ServeError, match="not a valid certificate and key pair"):
        tls_kwargs(cert, key)
    assert tls_kwargs(None, None) == {}


def test_bad_port_and_busy_port_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "99999"]) == 2
    assert "--port: 99999 is not a whole number >= 0 and <= 65535" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}") and "--port" in err
