"""The ``code`` grader: sandboxed Python tests (stdin/stdout, call-based, assert-based), compared in the parent."""

from graders.code.extract import extract_code
from graders.code.grader import CodeGrader
from graders.code.suites import GroundTruthError, parse_suite

__all__ = ["CodeGrader", "GroundTruthError", "extract_code", "parse_suite"]
