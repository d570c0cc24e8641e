"""A local HTTP server answering the Hugging Face Hub API calls ``HfApi.create_repo`` and ``upload_folder`` make
(``POST /api/repos/create``, ``/api/models/REPO/preupload/REV``, ``/api/models/REPO/commit/REV``; ``GET
/api/models/REPO`` refused without the token), so the push path runs offline against real HTTP. Every file is offered as a regular (inline, base64) upload; what the commits
carried is kept per repo for the test to compare with the folder it pushed. Any other request is answered 404 and
recorded in ``unexpected``."""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USER = "tester"
_PREUPLOAD = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/preupload/(?P<rev>[^/?]+)")
_REPO_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)$")
_COMMIT = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/?]+)")


@dataclass
class HubState:
    token: str
    repos: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # repo id -> {"private": bool, "files": {}}
    commits: list[tuple[str, str]] = field(default_factory=list)  # (repo id, summary)
    unexpected: list[str] = field(default_factory=list)
    authorizations: set[str] = field(default_factory=set)


class HubStub:
    """``with HubStub(token) as hub:`` serves on ``hub.url`` until the block ends."""

    def __init__(self, token: str) -> None:
        self.state = HubState(token)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            """Quiet: the test reads the state, not a log."""

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            with lock:
                if (
                    path == "/api/agent-harnesses"
                ):  # the library's own best-effort registry fetch (user agent)
                    self._reply(404, {"error": "not in the stub"})
                elif _REPO_INFO.match(path) and self.headers.get("Authorization") != f"Bearer {state.token}":
                    self._reply(
                        401, {"error": "Invalid credentials in Authorization header"}
                    )  # create_repo's
                    # exist_ok probe after a refused create
                else:
                    state.unexpected.append(f"GET {self.path}")
                    self._reply(404, {"error": "not in the stub"})

        def do_POST(self) -> None:
            body = self._body()
            auth = self.headers.get("Authorization", "")
            with lock:
                state.authorizations.add(auth)
                if auth != f"Bearer {state.token}":
                    self._reply(401, {"error": "Invalid credentials in Authorization header"})
                    return
                self._post(body)

        def _post(self, body: bytes) -> None:
            path = self.path.split("?")[0]
            if path == "/api/repos/create":
                req = json.loads(body)
                repo_id = f"{req.get('organization') or USER}/{req['name']}"
                if repo_id in state.repos:
                    self._reply(409, {"error": "You already created this model repo", "url": f"/{repo_id}"})
                    return
                private = req.get("visibility") == "private" or req.get("private") is True
                state.repos[repo_id] = {"private": private, "files": {}}
                self._reply(200, {"url": f"{self.server_url}/{repo_id}"})
            elif (m := _PREUPLOAD.match(path)) and m["repo"] in state.repos:
                files = json.loads(body)["files"]
                modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                self._reply(200, {"files": modes})
            elif (m := _COMMIT.match(path)) and m["repo"] in state.repos:
                self._commit(m["repo"], body)
            else:
                state.unexpected.append(f"POST {self.path}")
                self._reply(404, {"error": "Repository not found"})

        def _commit(self, repo_id: str, body: bytes) -> None:
            files = state.repos[repo_id]["files"]
            summary = ""
            for line in body.splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    summary = item["value"]["summary"]
                elif item["key"] == "file" and item["value"].get("encoding") == "base64":
                    files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                else:
                    state.unexpected.append(f"commit item {item['key']}")
            state.commits.append((repo_id, summary))
            oid = f"{len(state.commits):040x}"
            self._reply(200, {"commitUrl": f"{self.server_url}/{repo_id}/commit/{oid}", "commitOid": oid})

        @property
        def server_url(self) -> str:
            host, port = self.server.server_address[:2]
            return f"http://{host}:{port}"

    return Handler
