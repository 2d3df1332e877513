"""Serving the dashboard on HTTP (uvicorn), on localhost unless told otherwise."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn

from ..errors import InvalidArgumentError
from .app import create_app
from .artifacts import Artifacts


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or an error that says why the address cannot be used."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise InvalidArgumentError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        hint = "choose another --port" if e.errno == errno.EADDRINUSE else "check --host/--port"
        raise InvalidArgumentError(
            f"cannot listen on {host}:{port} ({e.strerror}); {hint}"
        ) from None
    sock.listen(128)
    return sock


def serve(
    art: Artifacts,
    host: str = "127.0.0.1",
    port: int = 8327,
    ready: Callable[[str], object] | None = None,
) -> None:
    """Serve `art` until interrupted. `ready(url)` is called once the socket listens."""
    sock = bind(host, port)
    try:
        url = f"http://{host}:{sock.getsockname()[1]}/"
        if ready is not None:
            ready(url)
        config = uvicorn.Config(create_app(art), log_level="warning", lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def running(art: Artifacts, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `art` on a background thread for the duration of a `with` block (tests,
    benchmarks); yields the base URL. Port 0 picks a free one."""
    sock = bind(host, port)
    config = uvicorn.Config(create_app(art), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            time.sleep(0.005)
        yield f"http://{host}:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
