"""`explore --serve` answers only requests addressed to the loopback name it bound (no DNS
rebinding), and a busy or impossible port is one line (issue 18, part 5; docs/architecture.md,
"Names from a model")."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading

from opfuse.report.explorer import page_server
from tests.helpers.cli import assert_clean_error


def _get(port: int, host: str | None) -> tuple[int, bytes]:
    """GET /p.html with ``host`` as the Host header (None: no Host header at all)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", "/p.html", skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_serve_answers_only_requests_for_its_loopback_host(tmp_path) -> None:
    page = tmp_path / "p.html"
    page.write_text("<!DOCTYPE html><title>p</title>", encoding="utf-8")
    server = page_server(page, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert _get(port, f"127.0.0.1:{port}") == (200, page.read_bytes())
        assert _get(port, f"localhost:{port}") == (200, page.read_bytes())
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}",
                     "127.0.0.1", f"127.0.0.1:{port}.evil.example", "", None):
            status, body = _get(port, host)
            assert status == 421 and b"<title>p" not in body, host
    finally:
        server.shutdown()
        server.server_close()


def test_serve_busy_or_invalid_port_is_one_line(tmp_path) -> None:
    def explore(port: str) -> tuple[int, str]:  # a subprocess: a server that starts cannot hang us
        proc = subprocess.run([sys.executable, "-m", "opfuse", "explore", "seed_block", "-o",
                               str(tmp_path / "e.html"), "--serve", "--port", port],
                              capture_output=True, text=True, timeout=240)
        return proc.returncode, proc.stderr

    for bad in ("70000", "-1"):
        code, err = explore(bad)
        assert_clean_error(code, err, f"--port {bad}")
        assert not (tmp_path / "e.html").exists()  # refused before the page is written
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code, err = explore(port)
    assert_clean_error(code, err, f"--port {port}", "cannot listen")
