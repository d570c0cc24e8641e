"""``rrl export --push-to-hub REPO``: upload an exported model directory to the Hugging Face Hub.

``huggingface_hub`` does the work (``create_repo`` + ``upload_folder``); this module only turns what can go wrong
for a user (no token, a malformed repo id, offline mode, a hub that refuses or cannot be reached) into one line.
The token comes from the usual places (``HF_TOKEN``, ``hf auth login``); ``HF_ENDPOINT`` picks another hub.
The target is checked before the export starts, so a missing token is reported before minutes of work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class HubPushError(Exception):
    """A push that cannot happen or failed; the message is one line naming the repo and the cause."""


@dataclass(frozen=True)
class HubTarget:
    """A repo on a hub that the user's token may write to (as far as can be told without asking the hub)."""

    repo_id: str
    private: bool
    token: str
    endpoint: str

    @classmethod
    def resolve(cls, repo_id: str, *, private: bool = False) -> HubTarget:
        from huggingface_hub import constants, get_token
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(repo_id)
        except HFValidationError as exc:
            reason = " ".join(str(exc).split())
            raise HubPushError(
                f"--push-to-hub {repo_id!r} is not a valid repo id (NAME or OWNER/NAME): {reason}"
            ) from None
        if constants.HF_HUB_OFFLINE:
            raise HubPushError(f"--push-to-hub {repo_id}: HF_HUB_OFFLINE is set; unset it to reach the hub")
        token = get_token()
        if not token:
            raise HubPushError(
                f"--push-to-hub {repo_id}: no Hugging Face token; set HF_TOKEN or run `hf auth login`"
            )
        return cls(repo_id, private, token, constants.ENDPOINT)

    def push(self, folder: Path, message: str) -> str:
        """Create the repo if it does not exist (``private`` applies only then) and upload ``folder`` as one
        commit; returns the repo's URL."""
        import httpx2
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        api = HfApi(endpoint=self.endpoint, token=self.token)
        try:
            url = api.create_repo(self.repo_id, private=self.private, exist_ok=True)
            api.upload_folder(repo_id=url.repo_id, folder_path=folder, commit_message=message)
        except HfHubHTTPError as exc:
            status = exc.response.status_code
            said = " ".join((exc.server_message or exc.response.reason_phrase or "").split())
            raise HubPushError(
                f"the hub at {self.endpoint} refused {self.repo_id}: HTTP {status}: {said}"
            ) from None
        except httpx2.TransportError as exc:
            raise HubPushError(f"cannot reach the hub at {self.endpoint} ({self.repo_id}): {exc}") from None
        return str(url)
