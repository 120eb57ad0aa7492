"""``workbench serve``: serve the Panel app (the same one as ``panel serve apps/workbench.py``).

Bound to localhost unless ``--address`` says otherwise. Exposed beyond localhost it refuses
to start without authentication: Panel's basic auth (``--basic-auth`` with
``--cookie-secret``) or an OAuth provider (``--oauth-provider`` with its key, secret and
``--cookie-secret``).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import sys
from typing import Any

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
            raise ServeError("--basic-auth needs --cookie-secret (a long random string)")
        kwargs.update(basic_auth=args.basic_auth, cookie_secret=args.cookie_secret)
    if args.oauth_provider:
        missing = [f for f in ("oauth_key", "oauth_secret", "cookie_secret")
                   if not getattr(args, f)]
        if missing:
            raise ServeError(
                "--oauth-provider needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        kwargs.update(oauth_provider=args.oauth_provider, oauth_key=args.oauth_key,
                      oauth_secret=args.oauth_secret, cookie_secret=args.cookie_secret)
        if args.oauth_encryption_key:
            kwargs["oauth_encryption_key"] = args.oauth_encryption_key
    if not is_loopback(args.address) and not kwargs:
        raise ServeError(
            f"--address {args.address} exposes the app beyond this machine; configure "
            "authentication (--basic-auth FILE --cookie-secret S, or --oauth-provider NAME "
            "--oauth-key K --oauth-secret S --cookie-secret S) or bind to 127.0.0.1"
        )
    return kwargs


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
    p.add_argument("--port", type=int, default=5006, help="port (default 5006; 0: any free)")
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
    p.add_argument("--show", action="store_true", help="open a browser")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        auth = auth_kwargs(args)
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import panel as pn

    from workbench.app import create_app

    db = args.db

    def session() -> Any:
        pn.extension("tabulator", notifications=True)
        return create_app(db).template()

    # Warm-up: one throw-away session reads the scenario into the cache all sessions share,
    # so the first visitor does not wait for it (the same as `panel serve --warm`).
    create_app(db)
    port = args.port or _free_port(args.address)
    host = "127.0.0.1" if args.address in ("0.0.0.0", "::") else args.address
    origins = [f"localhost:{port}", f"127.0.0.1:{port}", f"{host}:{port}",
               *args.allow_websocket_origin]
    server = pn.serve({"workbench": session}, port=port, address=args.address,
                      websocket_origin=sorted(set(origins)), show=False, start=False,
                      title="Workbench", verbose=False, **auth)
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/workbench"
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
