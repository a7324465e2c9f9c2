"""`dse storage-proxy`: a database served to many `dse run` workers through Optuna's gRPC storage
proxy, listening on loopback unless told otherwise (the channel has no authentication)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import DseError, RuntimeFailure, SpecError
from ..process.progress import note
from .backends import require_grpc, resolve_storage
from .credentials import redact_url
from .retries import StorageUnreachable

#: threads of `dse storage-proxy`'s gRPC server, each with its own connection
PROXY_THREADS = 10


def status_of(exc: DseError) -> tuple[str, str]:
    """The gRPC status (code name, details) a proxy call answers for ``exc``: UNAVAILABLE when its
    database stays unreachable (workers retry), OUT_OF_RANGE for bad input (exit 2 at the worker),
    INTERNAL for the rest (exit 1). Never a code Optuna's client reads as something else
    (NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, INVALID_ARGUMENT)."""
    if isinstance(exc, StorageUnreachable):
        return "UNAVAILABLE", f"its database: {exc.reason}"
    return ("OUT_OF_RANGE" if exc.exit_code == 2 else "INTERNAL"), str(exc)


def _statuses(out):
    """A gRPC server interceptor: a call that raises a DseError answers :func:`status_of` (one line
    on ``out`` too), not UNKNOWN with "Exception calling application"."""
    import grpc

    class Statuses(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):
            handler = continuation(details)
            if handler is None or handler.unary_unary is None:
                return handler
            inner, method = handler.unary_unary, details.method.rsplit("/", 1)[-1]

            def behaviour(request, context):
                try:
                    return inner(request, context)
                except DseError as exc:
                    code, text = status_of(exc)
                    note(f"dse storage-proxy: {method}: {code}: {text}", out)
                    context.abort(getattr(grpc.StatusCode, code), text)
            return grpc.unary_unary_rpc_method_handler(behaviour, request_deserializer=handler.request_deserializer,
                                                       response_serializer=handler.response_serializer)
    return Statuses()


def _learning(cached):
    """``cached`` (Optuna's _CachedStorage) whose set_trial_param, on a trial it has not seen (one
    created before this proxy started: a restarted proxy's workers go on suggesting into the trials
    they hold), reads every study's trials and sets it; Optuna's answers NOT_FOUND."""
    real = cached.set_trial_param

    def set_trial_param(trial_id, param_name, param_value_internal, distribution):
        try:
            return real(trial_id, param_name, param_value_internal, distribution)
        except KeyError:
            for s in cached.get_all_studies():
                cached.get_all_trials(s._study_id, deepcopy=False)
            return real(trial_id, param_name, param_value_internal, distribution)
    cached.set_trial_param = set_trial_param
    return cached


def proxy_server(storage, host: str, port: int, out=None):
    """Optuna's gRPC storage proxy server for ``storage`` (its make_server, which hands back the
    server so that a signal can stop it gracefully; run_grpc_proxy_server blocks with no way out),
    with :data:`PROXY_THREADS` threads and dse's statuses (:func:`status_of`); not started."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from optuna.storages._grpc.auto_generated.api_pb2_grpc import add_StorageServiceServicer_to_server
    from optuna.storages._grpc.servicer import OptunaStorageProxyService
    server = grpc.server(ThreadPoolExecutor(max_workers=PROXY_THREADS), interceptors=[_statuses(out)])
    add_StorageServiceServicer_to_server(OptunaStorageProxyService(storage), server)
    server.add_insecure_port(f"{host}:{port}")
    return server


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
    store, shown = resolve_storage(None, storage, Path("unused"), connections=PROXY_THREADS)
    cached = _learning(optuna.storages.get_storage(store))    # Optuna's per-process trial cache, as its docs advise
    _port_is_free(host, int(port))
    out = out or sys.stderr
    with stop_on_signals() as stop:
        try:
            server = proxy_server(cached, host, int(port), out)
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
