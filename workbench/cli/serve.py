"""``workbench serve``: serve the Panel app (the same one as ``panel serve apps/workbench.py``).

Bound to localhost unless ``--address`` says otherwise. Exposed beyond localhost it refuses
to start without authentication: Panel's basic auth (``--basic-auth`` with
``--cookie-secret``) or an OAuth provider (``--oauth-provider`` with its key, secret and
``--cookie-secret``). :func:`auth_kwargs` decides; the served script applies the same check
to the ``panel serve`` command line that runs it (:func:`refuse_exposure`).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import socket
import ssl
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.cli._args import number

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("localhost", "localhost.localdomain")


class ServeError(ValueError):
    """The serve options are unsafe or incomplete; the message says what to add."""


def is_loopback(address: str) -> bool:
    """Whether ``address`` (a name or an IP) only reaches this machine."""
    if address in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(address, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def auth_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The authentication options for :func:`panel.serve`, checked.

    Raises
    ------
    ServeError
        When the address is not loopback and no authentication is configured, or when an
        authentication option misses its companions.
    """
    kwargs: dict[str, Any] = {}
    if args.basic_auth and args.oauth_provider:
        raise ServeError("choose one of --basic-auth and --oauth-provider")
    if args.basic_auth:
        if not args.cookie_secret:
            raise ServeError("--basic-auth needs --cookie-secret (a long random string, e.g. "
                             "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        check_basic_auth(args.basic_auth)
        check_cookie_secret(args.cookie_secret)
        kwargs.update(basic_auth=args.basic_auth, cookie_secret=args.cookie_secret)
    if args.oauth_provider:
        missing = [f for f in ("oauth_key", "oauth_secret", "cookie_secret")
                   if not getattr(args, f)]
        if missing:
            raise ServeError(
                "--oauth-provider needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        check_cookie_secret(args.cookie_secret)
        kwargs.update(oauth_provider=args.oauth_provider, oauth_key=args.oauth_key,
                      oauth_secret=args.oauth_secret, cookie_secret=args.cookie_secret)
        if args.oauth_encryption_key:
            kwargs["oauth_encryption_key"] = args.oauth_encryption_key
    if not is_loopback(args.address) and not kwargs:
        said = getattr(args, "address_said", None) or f"--address {args.address}"
        raise ServeError(
            f"{said} exposes the app beyond this machine; configure "
            "authentication (--basic-auth FILE --cookie-secret S, or --oauth-provider NAME "
            "--oauth-key K --oauth-secret S --cookie-secret S) or bind to 127.0.0.1"
        )
    return kwargs



AUTH_ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "basic_auth": ("PANEL_BASIC_AUTH",), "cookie_secret": ("PANEL_COOKIE_SECRET",
                                                           "BOKEH_COOKIE_SECRET"),
    "oauth_provider": ("PANEL_OAUTH_PROVIDER",), "oauth_key": ("PANEL_OAUTH_KEY",),
    "oauth_secret": ("PANEL_OAUTH_SECRET",), "oauth_encryption_key": ("PANEL_OAUTH_ENCRYPTION",),
}
"""The authentication options :func:`auth_kwargs` reads, and the environment variables that
``panel serve`` takes them from when its command line gives none."""


def panel_serve_options(argv: Sequence[str], environ: Mapping[str, str]
                        ) -> argparse.Namespace | None:
    """The address and authentication of a ``panel serve`` (or ``bokeh serve``) command line,
    as :func:`auth_kwargs` reads them; None when ``argv`` is not such a command.

    ``argv`` is the process's command line (``sys.orig_argv``: a served script's own
    ``sys.argv`` holds only what follows ``--args``), ``environ`` the environment Panel
    reads the options from where the command line gives none. Without ``--address`` Bokeh
    listens on every interface; a ``--unix-socket`` reaches this machine only.
    """
    words = [str(w) for w in argv]
    start = next((i + 1 for i, w in enumerate(words) if w == "serve" and i > 0
                  and Path(words[i - 1]).stem in ("panel", "bokeh", "__main__")), None)
    if start is None:
        return None
    words = words[start:]
    if "--args" in words:
        words = words[:words.index("--args")]
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--address")
    parser.add_argument("--unix-socket")
    for option in AUTH_ENVIRONMENT:
        parser.add_argument("--" + option.replace("_", "-"))
    args, _ = parser.parse_known_args(words)
    for option, names in AUTH_ENVIRONMENT.items():
        if not getattr(args, option):
            setattr(args, option, next((environ[n] for n in names if environ.get(n)), None))
    if args.unix_socket:
        args.address = "localhost"
    elif args.address is None:
        args.address = "0.0.0.0"
        args.address_said = "panel serve without --address (it listens on every interface)"
    return args


def refuse_exposure(argv: Sequence[str], environ: Mapping[str, str]) -> None:
    """The served script's check: a ``panel serve`` that would expose the app beyond this
    machine without authentication (:func:`auth_kwargs`) stops with one line ``error: ...``
    on stderr and exit status 2 (:class:`SystemExit`), as ``workbench serve`` refuses to
    start. Anything else (loopback, authenticated, not run by ``panel serve``) passes.
    """
    options = panel_serve_options(argv, environ)
    if options is None:
        return
    try:
        auth_kwargs(options)
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


MIN_PASSWORD_CHARS = 12
"""Shortest accepted basic-auth password (a single one, or each in a credentials file)."""

MIN_COOKIE_SECRET_BYTES = 32
"""Shortest accepted cookie secret, in UTF-8 bytes (256 bits of a random token)."""


def _looks_like_path(value: str) -> bool:
    return value.endswith(".json") or "/" in value or "\\" in value or Path(value).exists()


def check_basic_auth(value: str) -> None:
    """``--basic-auth``: an existing JSON credentials file ``{"user": "password"}`` whose
    passwords are all >= 12 characters, or one password of >= 12 characters.

    A value that looks like a path (ends in ``.json``, holds a slash, or exists) must be a
    readable credentials file: Panel would otherwise take the file name as the password.
    """
    if _looks_like_path(value):
        path = Path(value)
        if not path.is_file():
            raise ServeError(f"--basic-auth {value}: no such credentials file; create it "
                             '(JSON {"user": "password"}) or pass a password of at least '
                             f"{MIN_PASSWORD_CHARS} characters")
        try:
            users = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ServeError(f"--basic-auth {value}: not a readable JSON file ({exc}); write "
                             '{"user": "password", ...}') from None
        if not isinstance(users, dict) or not users or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in users.items()):
            raise ServeError(f"--basic-auth {value}: expected a JSON object of user names to "
                             'passwords, e.g. {"ana": "a long passphrase"}')
        weak = sorted(k for k, v in users.items() if len(v) < MIN_PASSWORD_CHARS)
        if weak:
            raise ServeError(f"--basic-auth {value}: the passwords of {weak} are shorter than "
                             f"{MIN_PASSWORD_CHARS} characters; lengthen them")
        return
    if len(value) < MIN_PASSWORD_CHARS:
        raise ServeError(f"--basic-auth: the password has {len(value)} characters; use at "
                         f"least {MIN_PASSWORD_CHARS} (or a credentials file)")


def check_cookie_secret(value: str) -> None:
    """``--cookie-secret`` must hold at least 32 bytes."""
    n = len(value.encode("utf-8"))
    if n < MIN_COOKIE_SECRET_BYTES:
        raise ServeError(f"--cookie-secret has {n} bytes; use at least "
                         f"{MIN_COOKIE_SECRET_BYTES} random bytes, e.g. `python -c 'import "
                         "secrets; print(secrets.token_urlsafe(32))'`")


def tls_kwargs(certfile: Path | None, keyfile: Path | None) -> dict[str, str]:
    """``--certfile``/``--keyfile`` checked (both or neither, readable, a valid pair) as
    :func:`panel.serve` options."""
    if certfile is None and keyfile is None:
        return {}
    if certfile is None or keyfile is None:
        raise ServeError("--certfile and --keyfile go together; pass both (PEM files)")
    for flag, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if not path.is_file():
            raise ServeError(f"{flag} {path}: no such file; pass the PEM file's path")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            str(certfile), str(keyfile))
    except (ssl.SSLError, OSError) as exc:
        raise ServeError(f"--certfile {certfile} / --keyfile {keyfile}: not a valid "
                         f"certificate and key pair ({exc}); pass matching PEM files") from None
    return {"ssl_certfile": str(certfile), "ssl_keyfile": str(keyfile)}


def _free_port(address: str) -> int:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve the web app (localhost unless --address says otherwise)",
        description="Serve the workbench web app with Panel. It binds to 127.0.0.1 by default; "
        "any other address needs --basic-auth or --oauth-provider.",
    )
    p.add_argument("--port", type=number(0, 65535, integer=True),
                   default=5006, help="port (default 5006; 0: any free)")
    p.add_argument("--address", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--allow-websocket-origin", action="append", default=[], metavar="HOST[:PORT]",
                   help="extra host allowed to open the app's websocket (repeat)")
    p.add_argument("--basic-auth", default=None, metavar="FILE|PASSWORD",
                   help="Panel basic auth: a JSON file of user: password, or one password")
    p.add_argument("--cookie-secret", default=None, help="secret that signs session cookies")
    p.add_argument("--oauth-provider", default=None, help="Panel OAuth provider, e.g. github")
    p.add_argument("--oauth-key", default=None, help="OAuth client id")
    p.add_argument("--oauth-secret", default=None, help="OAuth client secret")
    p.add_argument("--oauth-encryption-key", default=None, help="key encrypting OAuth tokens")
    p.add_argument("--certfile", type=Path, default=None, metavar="PEM",
                   help="TLS certificate (PEM) to serve https; needs --keyfile")
    p.add_argument("--keyfile", type=Path, default=None, metavar="PEM",
                   help="TLS private key (PEM) of --certfile")
    p.add_argument("--show", action="store_true", help="open a browser")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        auth = auth_kwargs(args)
        auth.update(tls_kwargs(args.certfile, args.keyfile))
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import panel as pn

    from workbench.app import create_app

    db = args.db

    def session() -> Any:
        pn.extension("tabulator")
        return create_app(db).template()

    # Warm-up: one throw-away session reads the scenario into the cache all sessions share,
    # so the first visitor does not wait for it (the same as `panel serve --warm`).
    create_app(db)
    port = args.port or _free_port(args.address)
    host = "127.0.0.1" if args.address in ("0.0.0.0", "::") else args.address
    origins = [f"localhost:{port}", f"127.0.0.1:{port}", f"{host}:{port}",
               *args.allow_websocket_origin]
    try:
        server = pn.serve({"workbench": session}, port=port, address=args.address,
                          websocket_origin=sorted(set(origins)), show=False, start=False,
                          title="Workbench", verbose=False, **auth)
    except OSError as exc:
        print(f"error: cannot listen on {args.address}:{port}: {exc.strerror or exc}; pass "
              "another --port (0: any free port) or stop what uses it", file=sys.stderr)
        return 2
    scheme = "https" if "ssl_certfile" in auth else "http"
    url = f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}/workbench"
    print(f"Workbench app at {url} (store {db}); Ctrl-C stops it", flush=True)
    if args.show:
        server.io_loop.add_callback(server.show, "/workbench")
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
