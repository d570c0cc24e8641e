"""Grading runtime: killable workers (local processes or Ray actors), hard budgets, cache, metrics.

from graders.runtime import GradingPool, GradeRequest
with GradingPool(workers=2, timeout_s=10, cache_path="grades.sqlite") as pool:
    grades = pool.grade_batch([GradeRequest("math", response, "42")])
"""

from graders.functions import function_spec
from graders.runtime.golds import gold_problems
from graders.runtime.helper_pool import HelperPool, WorkerCrashed, WorkerTimeout, serve
from graders.runtime.pool import GradingPool
from graders.runtime.request import GradeRequest, importable_from_cwd, resolve_grader

__all__ = [
    "GradeRequest",
    "GradingPool",
    "HelperPool",
    "WorkerCrashed",
    "WorkerTimeout",
    "function_spec",
    "gold_problems",
    "importable_from_cwd",
    "resolve_grader",
    "serve",
]
