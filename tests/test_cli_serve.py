"""``workbench serve`` binds to loopback by default; it and the served script (``panel serve
apps/workbench.py``) refuse to expose the app without authentication (one check:
``auth_kwargs``)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from workbench import Store
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


# -- the served script: `panel serve apps/workbench.py` applies the same check ------------
ROOT = Path(__file__).resolve().parents[1]
PANEL = ["/venv/bin/panel", "serve", "apps/workbench.py"]


@pytest.mark.parametrize("argv, environ, refused", [
    ([*PANEL, "--address", "0.0.0.0"], {}, "--address 0.0.0.0 exposes"),
    ([*PANEL, "--address=10.1.2.3", "--port", "5006"], {}, "--address 10.1.2.3 exposes"),
    (PANEL, {}, "panel serve without --address (it listens on every interface) exposes"),
    ([*PANEL, "--address", "0.0.0.0", "--basic-auth", "x", "--cookie-secret", SECRET], {},
     "the password has 1 characters"),
    ([*PANEL, "--address", "0.0.0.0", "--args", "--address", "127.0.0.1"], {}, "0.0.0.0"),
    ([*PANEL, "--address", "127.0.0.1"], {}, None),
    ([*PANEL, "--address", "localhost", "--args", "--db", "x.duckdb"], {}, None),
    ([*PANEL, "--unix-socket", "/tmp/wb.sock"], {}, None),
    ([*PANEL, "--address", "0.0.0.0", "--basic-auth", PASSWORD, "--cookie-secret", SECRET],
     {}, None),
    ([*PANEL, "--address", "0.0.0.0"],
     {"PANEL_BASIC_AUTH": PASSWORD, "PANEL_COOKIE_SECRET": SECRET}, None),
    ([*PANEL, "--address", "0.0.0.0"], {"PANEL_OAUTH_PROVIDER": "github"},
     "--oauth-provider needs --oauth-key"),
    (["python", "-c", "import apps.workbench"], {}, None),  # not served: nothing to check
])
def test_the_served_script_refuses_like_workbench_serve(
    argv: list[str], environ: dict[str, str], refused: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """:func:`refuse_exposure` reads the ``panel serve`` command line (and Panel's
    environment) and applies :func:`auth_kwargs`, the check of ``workbench serve``."""
    from workbench.cli.serve import refuse_exposure

    if refused is None:
        refuse_exposure(argv, environ)
        assert capsys.readouterr().err == ""
        return
    with pytest.raises(SystemExit) as stop:
        refuse_exposure(argv, environ)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and refused in err, err


def _panel_serve(*args: str, db: Path) -> subprocess.Popen[str]:
    panel = shutil.which("panel", path=str(Path(sys.executable).parent)) or "panel"
    return subprocess.Popen([panel, "serve", str(ROOT / "apps" / "workbench.py"), *args,
                             "--num-procs", "1", "--args", "--db", str(db)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "BOKEH_RESOURCES": "server"})


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers_sim import tiny_scenario, training

    db = tmp_path_factory.mktemp("serve") / "wb.duckdb"
    with Store(db) as store:  # sorts before the built-in seed3: the app opens on it
        store.save_scenario(tiny_scenario([training("j1")], name="a-tiny"))
    return db


@pytest.mark.slow  # starts a panel server
def test_panel_serve_of_the_app_refuses_every_interface_without_auth(
        small_store: Path) -> None:
    """``panel serve apps/workbench.py --address 0.0.0.0 --warm``: one line, exit 2,
    nothing served."""
    port = _free_port()
    proc = _panel_serve("--address", "0.0.0.0", "--port", str(port), "--warm", db=small_store)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1].startswith("error: --address 0.0.0.0 exposes the app")
    assert "Traceback" not in err
    with pytest.raises(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/workbench",
                                                        timeout=2):
        pass


@pytest.mark.slow  # starts a panel server
def test_panel_serve_of_the_app_serves_on_localhost(small_store: Path) -> None:
    port = _free_port()
    proc = _panel_serve("--address", "127.0.0.1", "--port", str(port),
                        "--allow-websocket-origin", f"127.0.0.1:{port}", db=small_store)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/workbench",
                                            timeout=120) as page:
                    assert page.status == 200 and b"Workbench" in page.read()
                    break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "panel serve did not answer on localhost"
                time.sleep(0.3)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
