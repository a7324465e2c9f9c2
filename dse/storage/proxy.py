"""`dse storage-proxy`: a database served to many `dse run` workers through Optuna's gRPC storage
proxy, listening on loopback unless told otherwise (the channel has no authentication)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import RuntimeFailure, SpecError
from ..process.progress import note
from .backends import require_grpc, resolve_storage
from .credentials import redact_url

#: threads of `dse storage-proxy`'s gRPC server, each with its own connection
PROXY_THREADS = 10


def _port_is_free(host: str, port: int) -> None:
    """gRPC binds with SO_REUSEPORT: a second proxy on a busy port would start and share the
    port's connections silently. A plain bind tells; a busy port is a runtime failure (exit 1)."""
    import errno
    import socket
    try:
        addrs = {a[:2] + (a[4],) for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError as exc:
        raise SpecError(None, "--host", host, f"cannot resolve it ({exc.strerror or exc})") from None
    for family, kind, addr in addrs:
        with socket.socket(family, kind) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise RuntimeFailure(f"--host {host} --port {port}: the port is in use (another "
                                         "storage-proxy?); stop it or give another --port") from None
                if exc.errno != errno.EADDRNOTAVAIL:     # e.g. no IPv6 on this host: gRPC skips it too
                    raise RuntimeFailure(f"--host {host} --port {port}: cannot listen there ({exc.strerror})") from None


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address (127.0.0.0/8, ::1)."""
    import ipaddress
    import socket
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return False
    try:
        return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)
    except ValueError:
        return False


#: what `dse storage-proxy` says when it starts: the channel carries no credentials
NO_AUTH = ("no authentication: anyone who can reach this port can read, change and delete every study in the "
           "database")


def serve_proxy(storage: str, host: str = "localhost", port: int = 13000, grace_s: float = 10.0, out=None,
                allow_remote: bool = False) -> int:
    """Serve a database storage to `dse run --storage grpc://HOST:PORT` workers through Optuna's
    gRPC storage proxy until SIGTERM or SIGINT; then finish the calls in flight (up to ``grace_s``)
    and return the signal's number. One process holds the database connections (one per server
    thread, :data:`PROXY_THREADS`), so hundreds of workers cost one pool (optuna.md section 7).
    Journal files cannot be proxied (Optuna issue #6084). The channel has no authentication
    (:data:`NO_AUTH`): a ``host`` that is not loopback is refused unless ``allow_remote``."""
    import optuna

    from ..process.interrupt import stop_on_signals
    if "://" not in str(storage) or str(storage).startswith("grpc://"):
        raise SpecError(None, "--storage", redact_url(storage), "the proxy serves a database: sqlite:///FILE, "
                        "postgresql+psycopg://USER@HOST/DB or mysql+pymysql://USER@HOST/DB (Optuna cannot proxy "
                        "a journal file, issue #6084)")
    require_grpc("--storage", storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)     # no line per study the workers create
    if not 0 < int(port) < 65536:
        raise SpecError(None, "--port", port, "expected 1..65535")
    if not allow_remote and not is_loopback(host):
        raise SpecError(None, "--host", host, f"is not a loopback address, and the proxy has {NO_AUTH}; give "
                        "--allow-remote to listen there anyway (on a network only trusted machines reach), or "
                        "keep localhost and reach it through an SSH tunnel")
    # Optuna's make_server, not run_grpc_proxy_server: it hands back the server, so a signal can
    # stop it gracefully (run_grpc_proxy_server blocks in wait_for_termination with no way out)
    from concurrent.futures import ThreadPoolExecutor

    from optuna.storages._grpc.server import make_server
    store, shown = resolve_storage(None, storage, Path("unused"), connections=PROXY_THREADS)
    cached = optuna.storages.get_storage(store)         # Optuna's per-process trial cache, as its docs advise
    _port_is_free(host, int(port))
    out = out or sys.stderr
    with stop_on_signals() as stop:
        try:
            server = make_server(cached, host, int(port), ThreadPoolExecutor(max_workers=PROXY_THREADS))
            server.start()
        except RuntimeError as exc:
            raise RuntimeFailure(f"--host {host} --port {port}: cannot listen there ({exc})") from None
        note(f"dse storage-proxy: serving {shown} at grpc://{host}:{port} (workers: dse run STUDY "
             f"--storage grpc://{host}:{port}); SIGTERM or Ctrl-C stops it", out)
        note(f"dse storage-proxy: {NO_AUTH}" + ("" if is_loopback(host) else
             f"; listening on {host} (--allow-remote): only trusted machines may reach port {port}"), out)
        while not stop.requested:
            time.sleep(0.2)
        server.stop(grace_s).wait()
    note(f"dse storage-proxy: stopped by {stop.name}; every call in flight was finished", out)
    return stop.signum
