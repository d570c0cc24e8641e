"""Whether a hub model id can be loaded at all, said in one line before transformers tries.

Without a network transformers retries each file for ~50 s and prints two dozen lines before its own error
(issue 47: 51 s and 24 lines for an unreachable id). A model already in the local Hugging Face cache loads
offline; otherwise ``HF_HUB_OFFLINE`` means it cannot, and an unreachable hub is found once per process by one
short TCP connection to the endpoint.
"""

from __future__ import annotations

import socket
from functools import cache
from urllib.parse import urlparse

CONNECT_TIMEOUT_S = 5.0


def cached_locally(repo_id: str, filename: str = "config.json") -> bool:
    """The model's ``filename`` (config.json, or a GGUF file) is in the local Hugging Face cache (then it loads
    without the network)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, filename), str)


@cache
def _reachable(endpoint: str) -> str | None:
    """None when a TCP connection to ``endpoint`` opens, else why not (once per endpoint and process)."""
    url = urlparse(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{host}:{port} unreachable ({exc.strerror or type(exc).__name__})"
    return None


def hub_problem(repo_id: str, filename: str = "config.json") -> str | None:
    """One line saying why ``repo_id`` cannot be loaded here, or None (cached, or the hub is reachable)."""
    from huggingface_hub import constants

    if cached_locally(repo_id, filename):
        return None
    if constants.HF_HUB_OFFLINE:
        return (
            f"model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: download it "
            "first (`hf download`) or give a local model directory"
        )
    why = _reachable(constants.ENDPOINT)
    if why is None:
        return None
    return (
        f"model {repo_id!r} is not in the local Hugging Face cache and the hub is {why}: connect, or give a "
        "local model directory"
    )
