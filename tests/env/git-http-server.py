#!/usr/bin/env python3
"""Serves one git repository over Git's smart HTTP protocol on 127.0.0.1, for the tests' Flux
sources: `git http-backend` (part of git) run as a CGI program per request, so every commit made
in the repository afterwards is served at once.

usage: git-http-server.py REPO_DIR PORT_FILE

The repository is served at http://127.0.0.1:PORT/<basename of REPO_DIR>; nothing else is. PORT is
chosen by the kernel and written to PORT_FILE once the socket listens.
"""

import http.server
import os
import subprocess
import sys


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    repo = os.path.realpath(sys.argv[1])
    port_file = sys.argv[2]
    if not os.path.isdir(os.path.join(repo, ".git")) and not os.path.isfile(
        os.path.join(repo, "HEAD")
    ):
        sys.exit(f"error: {repo} is not a git repository (run git init there first)")
    root, name = os.path.split(repo)
    prefix = f"/{name}/"
    backend = subprocess.run(
        ["git", "--exec-path"], check=True, capture_output=True, text=True
    ).stdout.strip()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.run_backend()

        def do_POST(self) -> None:
            self.run_backend()

        def body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def run_backend(self) -> None:
            path, _, query = self.path.partition("?")
            if not path.startswith(prefix) or ".." in path:
                self.send_error(404, f"only {prefix} is served here")
                return
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "REMOTE_ADDR": self.client_address[0],
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                # The repository belongs to whoever runs the tests, not to this server.
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "safe.directory",
                "GIT_CONFIG_VALUE_0": "*",
            }
            data = self.body()
            encoding = self.headers.get("Content-Encoding", "")
            if encoding:
                env["HTTP_CONTENT_ENCODING"] = encoding
            env["CONTENT_LENGTH"] = str(len(data))
            result = subprocess.run(
                [os.path.join(backend, "git-http-backend")],
                input=data,
                env=env,
                capture_output=True,
            )
            if result.stderr:
                sys.stderr.write(result.stderr.decode(errors="replace"))
            head, _, payload = result.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = result.stdout.partition(b"\n\n")
            status, headers = 200, []
            for line in head.decode(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.split()[0])
                elif key:
                    headers.append((key, value.strip()))
            if result.returncode != 0 and status == 200:
                status = 500
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = f"{port_file}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_port}\n")
    os.replace(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
