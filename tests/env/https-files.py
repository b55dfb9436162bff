#!/usr/bin/env python3
"""Serves a directory over HTTPS on 127.0.0.1, as a release mirror does, and logs every request:
the tests of `kubectl tenantflux flux` read the log to see what the plugin downloaded.

usage: https-files.py DIR CERT KEY PORT_FILE LOG_FILE

GET /PATH answers DIR/PATH (404 when it is no file); nothing else is served. PORT is chosen by
the kernel and written to PORT_FILE once the socket listens. Each request appends
"METHOD PATH STATUS" to LOG_FILE before its answer is sent.
"""

import http.server
import os
import ssl
import sys


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    root, cert, key, port_file, log_file = sys.argv[1:]
    root = os.path.realpath(root)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = os.path.realpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
            found = path.startswith(root + os.sep) and os.path.isfile(path)
            with open(log_file, "a", encoding="utf-8") as log:
                log.write(f"GET {self.path} {200 if found else 404}\n")
            if not found:
                self.send_error(404)
                return
            size = os.path.getsize(path)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as body:
                while chunk := body.read(1 << 20):
                    self.wfile.write(chunk)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(port_file + ".tmp", "w", encoding="utf-8") as out:
        out.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
