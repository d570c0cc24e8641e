"""Model-backed graders: a sequence-classification reward model (``reward_model``) and an LLM judge
(``judge``), with the rule graders' contract (name + version, tri-state verdicts, hard budgets, cache,
golden cases). They live in ``reasoning_rl`` rather than ``graders`` because they need torch/transformers
(``graders`` installs without them); they reach the runtime through the same registry names, and import
torch only when a model is first used."""

from reasoning_rl.model_graders.judge import JudgeGrader
from reasoning_rl.model_graders.reward_model import RewardModelGrader

__all__ = ["JudgeGrader", "RewardModelGrader"]
