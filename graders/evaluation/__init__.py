"""Evaluation-only grading (``rrl grade``): read rows, grade every response, write results, summarise."""
