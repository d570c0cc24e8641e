"""Writes code_stdio_suite.json and code_call_suite.json: our own problems, reference and wrong solutions.

Expected outputs are produced by running the reference solution here (trusted) once; the JSON is committed.
Run: .venv/bin/python tests/graders/data/make_code_suites.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent

STDIO = [
    (
        "add_two",
        "a, b = map(int, input().split())\nprint(a + b)",
        ["a, b = map(int, input().split())\nprint(a - b)"],
        ["1 2", "0 0", "-5 5", "1000000000 1000000000", "7 -12", "123 456"],
        {},
    ),
    (
        "sum_n",
        "n = int(input())\nprint(sum(map(int, input().split())))",
        ["n = int(input())\nprint(sum(list(map(int, input().split()))[:-1]))"],
        ["3\n1 2 3", "1\n5", "5\n-1 -2 -3 -4 -5", "4\n10 20 30 40", "2\n0 0", "6\n1 1 1 1 1 1"],
        {},
    ),
    (
        "maximum",
        "input()\nprint(max(map(int, input().split())))",
        ["input()\nprint(min(map(int, input().split())))"],
        ["3\n1 5 2", "1\n-7", "4\n-1 -2 -3 -4", "5\n9 9 9 9 9", "2\n100 99", "3\n0 -1 1"],
        {},
    ),
    (
        "reverse",
        "print(input()[::-1])",
        ["print(input())"],
        ["abc", "a", "racecar", "hello world", "12345", "ab"],
        {},
    ),
    (
        "vowels",
        "print(sum(c in 'aeiouAEIOU' for c in input()))",
        ["print(sum(c in 'aeiou' for c in input()))"],
        ["hello", "AEIOU", "xyz", "Programming Is Fun", "a", "queue"],
        {},
    ),
    (
        "fibonacci",
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)",
        ["n = int(input())\na, b = 1, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)"],
        ["0", "1", "2", "10", "50", "90"],
        {},
    ),
    (
        "is_prime",
        "n = int(input())\nprint('YES' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'no')",
        ["n = int(input())\nprint('YES' if all(n % d for d in range(2, n)) else 'NO')"],
        ["1", "2", "17", "18", "97", "7919", "1000000007"],
        {"case": "insensitive"},
    ),
    (
        "gcd",
        "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))",
        ["a, b = map(int, input().split())\nprint(min(a, b))"],
        ["12 18", "7 13", "100 10", "0 5", "81 27", "1071 462"],
        {},
    ),
    (
        "sort_numbers",
        "input()\nprint(*sorted(map(int, input().split())))",
        ["input()\nprint(*sorted(map(int, input().split()), reverse=True))"],
        ["3\n3 1 2", "1\n5", "5\n5 4 3 2 1", "4\n1 1 0 0", "3\n-1 10 -100", "2\n2 2"],
        {},
    ),
    (
        "factorial_mod",
        "n = int(input())\nr = 1\nfor i in range(2, n + 1):\n    r = r * i % 1000000007\nprint(r)",
        ["n = int(input())\nr = 1\nfor i in range(2, n):\n    r = r * i % 1000000007\nprint(r)"],
        ["0", "1", "5", "20", "1000", "100000"],
        {},
    ),
    (
        "palindrome",
        "s = input().strip()\nprint('YES' if s == s[::-1] else 'NO')",
        ["s = input().strip()\nprint('YES' if s[0] == s[-1] else 'NO')"],
        ["abba", "abca", "a", "racecar", "ab", "abcdba"],
        {},
    ),
    (
        "average",
        "input()\nxs = list(map(float, input().split()))\nprint(sum(xs) / len(xs))",
        ["input()\nxs = list(map(float, input().split()))\nprint(round(sum(xs) / len(xs)))"],
        ["3\n1 2 4", "1\n0.1", "2\n1 2", "4\n0.5 0.25 0.125 0.0625", "3\n10 20 31", "5\n1 1 1 1 2"],
        {"float_tol": 1e-6},
    ),
    (
        "count_words",
        "print(len(input().split()))",
        ["print(input().count(' ') + 1)"],
        ["hello world", "one", "  leading and trailing  ", "a b  c", "many   spaces   here", "x y z w"],
        {},
    ),
    (
        "transpose",
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
        "for j in range(c):\n    print(' '.join(m[i][j] for i in range(r)))",
        [
            "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor row in m:\n    print(' '.join(row))"
        ],
        [
            "2 3\n1 2 3\n4 5 6",
            "1 1\n7",
            "3 1\n1\n2\n3",
            "2 2\n1 2\n3 4",
            "1 4\n9 8 7 6",
            "3 2\n1 2\n3 4\n5 6",
        ],
        {},
    ),
    (
        "fizzbuzz",
        "n = int(input())\nfor i in range(1, n + 1):\n"
        "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)",
        [
            "n = int(input())\nfor i in range(1, n + 1):\n    print('Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)"
        ],
        ["1", "3", "5", "15", "16", "30"],
        {},
    ),
    (
        "binary",
        "print(bin(int(input()))[2:])",
        ["print(bin(int(input())))"],
        ["0", "1", "2", "10", "255", "1024"],
        {},
    ),
    (
        "second_largest",
        "input()\nxs = sorted(set(map(int, input().split())))\nprint(xs[-2] if len(xs) > 1 else -1)",
        ["input()\nxs = sorted(map(int, input().split()))\nprint(xs[-2] if len(xs) > 1 else -1)"],
        ["3\n1 2 3", "3\n3 3 2", "1\n5", "2\n4 4", "5\n5 1 5 2 4", "4\n-1 -2 -3 -4"],
        {},
    ),
    (
        "distinct",
        "input()\nprint(len(set(input().split())))",
        ["input()\nprint(len(input().split()))"],
        ["3\n1 2 3", "3\n1 1 1", "5\n1 2 1 2 3", "1\n9", "4\n4 3 3 4", "6\n1 2 3 4 5 5"],
        {},
    ),
    (
        "coins",
        "n = int(input())\nc = 0\nfor d in (25, 10, 5, 1):\n    c += n // d\n    n %= d\nprint(c)",
        ["n = int(input())\nc = 0\nfor d in (10, 5, 1):\n    c += n // d\n    n %= d\nprint(c)"],
        ["0", "1", "30", "99", "41", "100"],
        {},
    ),
    (
        "longest_run",
        "s = input()\nbest = cur = 1\nfor a, b in zip(s, s[1:]):\n"
        "    cur = cur + 1 if a == b else 1\n    best = max(best, cur)\nprint(best)",
        ["s = input()\nprint(max(s.count(c) for c in s))"],
        ["aaabb", "a", "abab", "abbbbc", "zzzzzz", "aabbaaa"],
        {},
    ),
    (
        "digit_sum",
        "print(sum(map(int, input().strip())))",
        ["print(len(input().strip()))"],
        ["0", "9", "123", "99999", "1000001", "5050"],
        {},
    ),
    (
        "prefix_sums",
        "input()\ns = 0\nout = []\nfor x in map(int, input().split()):\n    s += x\n    out.append(s)\nprint(*out)",
        ["input()\nxs = list(map(int, input().split()))\nprint(*[sum(xs[:i]) for i in range(len(xs))])"],
        ["3\n1 2 3", "1\n5", "4\n-1 1 -1 1", "5\n0 0 0 0 1", "2\n10 -10", "3\n7 7 7"],
        {},
    ),
]

CALL = [
    (
        "two_sum",
        "twoSum",
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n",
        ["class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n"],
        [
            [[2, 7, 11, 15], 9],
            [[3, 2, 4], 6],
            [[3, 3], 6],
            [[1, 5, 9, 2], 11],
            [[0, 4, 3, 0], 0],
            [[-1, -2, -3, -4, -5], -8],
        ],
        {},
    ),
    (
        "reverse_list",
        "reverse_list",
        "def reverse_list(xs):\n    return xs[::-1]",
        ["def reverse_list(xs):\n    return sorted(xs)"],
        [[[1, 2, 3]], [[]], [[5]], [[3, 1, 2]], [["a", "b"]], [[1, 1, 2]]],
        {},
    ),
    (
        "is_palindrome",
        "is_palindrome",
        "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]",
        ["def is_palindrome(s):\n    return s == s[::-1]"],
        [["A man, a plan, a canal: Panama"], ["race a car"], [""], ["ab_a"], ["No 'x' in Nixon"], ["abc"]],
        {},
    ),
    (
        "max_subarray",
        "maxSubArray",
        "class Solution:\n    def maxSubArray(self, nums):\n        best = cur = nums[0]\n"
        "        for x in nums[1:]:\n            cur = max(x, cur + x)\n            best = max(best, cur)\n"
        "        return best\n",
        ["class Solution:\n    def maxSubArray(self, nums):\n        return sum(x for x in nums if x > 0)\n"],
        [
            [[-2, 1, -3, 4, -1, 2, 1, -5, 4]],
            [[1]],
            [[5, 4, -1, 7, 8]],
            [[-3, -1, -2]],
            [[0, 0]],
            [[2, -1, 2]],
        ],
        {},
    ),
    (
        "merge_intervals",
        "merge",
        "def merge(intervals):\n    out = []\n    for s, e in sorted(intervals):\n"
        "        if out and s <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], e)\n"
        "        else:\n            out.append([s, e])\n    return out",
        ["def merge(intervals):\n    return sorted(intervals)"],
        [
            [[[1, 3], [2, 6], [8, 10]]],
            [[[1, 4], [4, 5]]],
            [[[1, 2]]],
            [[[5, 6], [1, 2]]],
            [[[1, 10], [2, 3], [4, 5]]],
            [[]],
        ],
        {},
    ),
    (
        "char_count",
        "char_count",
        "def char_count(s):\n    d = {}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d",
        ["def char_count(s):\n    return {c: 1 for c in s}"],
        [["hello"], [""], ["aaa"], ["abcabc"], ["Mississippi"], ["xyz"]],
        {},
    ),
    (
        "unique_sorted",
        "unique_sorted",
        "def unique_sorted(xs):\n    return sorted(set(xs))",
        ["def unique_sorted(xs):\n    return list(set(xs))[::-1]"],
        [[[3, 1, 2, 3]], [[]], [[1]], [[5, 5, 5]], [[-1, 3, -1, 2]], [[10, 9, 8]]],
        {},
    ),
    (
        "flatten",
        "flatten",
        "def flatten(xs):\n    out = []\n    for x in xs:\n"
        "        out.extend(flatten(x) if isinstance(x, list) else [x])\n    return out",
        ["def flatten(xs):\n    return [y for x in xs for y in (x if isinstance(x, list) else [x])]"],
        [[[1, [2, [3, [4]]]]], [[]], [[[[]]]], [[1, 2, 3]], [[[1], [2], [[3]]]], [[["a"], ["b", ["c"]]]]],
        {},
    ),
    (
        "min_max",
        "min_max",
        "def min_max(xs):\n    return (min(xs), max(xs))",
        ["def min_max(xs):\n    return (max(xs), min(xs))"],
        [[[1, 2, 3]], [[5]], [[-1, 1]], [[3, 3, 1]], [[0, -5, 5]], [[2, 9, 4]]],
        {},
    ),
    (
        "mean",
        "mean",
        "def mean(xs):\n    return sum(xs) / len(xs)",
        ["def mean(xs):\n    return sum(xs) // len(xs)"],
        [[[1, 2, 4]], [[0.1, 0.2]], [[1]], [[1, 2]], [[3, 3, 4]], [[10, 20, 31]]],
        {"float_tol": 1e-9},
    ),
    (
        "fib",
        "fib",
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        ["def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 3)"],
        [[0], [1], [2], [10], [30], [100]],
        {},
    ),
    (
        "gcd",
        "gcd",
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
        ["def gcd(a, b):\n    return a % b"],
        [[12, 18], [7, 13], [100, 10], [0, 5], [81, 27], [1071, 462]],
        {},
    ),
    (
        "climb_stairs",
        "climbStairs",
        "class Solution:\n    def climbStairs(self, n: int) -> int:\n        a, b = 1, 1\n"
        "        for _ in range(n):\n            a, b = b, a + b\n        return a\n",
        ["class Solution:\n    def climbStairs(self, n: int) -> int:\n        return n\n"],
        [[1], [2], [3], [5], [10], [45]],
        {},
    ),
    (
        "valid_parentheses",
        "isValid",
        "class Solution:\n    def isValid(self, s):\n        st = []\n        pairs = {')': '(', ']': '[', '}': '{'}\n"
        "        for c in s:\n            if c in pairs:\n                if not st or st.pop() != pairs[c]:\n"
        "                    return False\n            else:\n                st.append(c)\n        return not st\n",
        ["class Solution:\n    def isValid(self, s):\n        return s.count('(') == s.count(')')\n"],
        [["()"], ["()[]{}"], ["(]"], ["([)]"], ["{[]}"], [""], ["(("]],
        {},
    ),
    (
        "roman_to_int",
        "romanToInt",
        "class Solution:\n    def romanToInt(self, s):\n        v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "        total = 0\n        for i, c in enumerate(s):\n"
        "            total += -v[c] if i + 1 < len(s) and v[c] < v[s[i + 1]] else v[c]\n        return total\n",
        [
            "class Solution:\n    def romanToInt(self, s):\n        v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
            "        return sum(v[c] for c in s)\n"
        ],
        [["III"], ["LVIII"], ["MCMXCIV"], ["IV"], ["IX"], ["MMXXVI"]],
        {},
    ),
    (
        "int_to_roman",
        "int_to_roman",
        "def int_to_roman(n):\n    vals = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),\n"
        "            (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
        "    out = ''\n    for v, s in vals:\n        while n >= v:\n            out += s\n            n -= v\n    return out",
        ["def int_to_roman(n):\n    return 'I' * n"],
        [[1], [4], [9], [58], [1994], [3999]],
        {},
    ),
    (
        "top_k_words",
        "top_k",
        "def top_k(words, k):\n    from collections import Counter\n    c = Counter(words)\n"
        "    return sorted(c, key=lambda w: (-c[w], w))[:k]",
        ["def top_k(words, k):\n    return sorted(set(words))[:k]"],
        [
            [["a", "b", "a"], 1],
            [["x"], 1],
            [["b", "a", "b", "c", "c"], 2],
            [["the", "day", "is", "sunny", "the", "the", "sunny", "is", "is"], 4],
            [["p", "q"], 2],
            [["z", "y", "z", "y", "x"], 3],
        ],
        {},
    ),
    (
        "rotate",
        "rotate",
        "def rotate(xs, k):\n    if not xs:\n        return xs\n    k %= len(xs)\n    return xs[-k:] + xs[:-k]",
        ["def rotate(xs, k):\n    return xs[k:] + xs[:k]"],
        [[[1, 2, 3, 4, 5], 2], [[1], 5], [[], 3], [[1, 2], 0], [[1, 2, 3], 3], [[1, 2, 3], 4]],
        {},
    ),
    (
        "binary_search",
        "search",
        "def search(xs, t):\n    lo, hi = 0, len(xs) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n"
        "        if xs[mid] == t:\n            return mid\n        if xs[mid] < t:\n            lo = mid + 1\n"
        "        else:\n            hi = mid - 1\n    return -1",
        ["def search(xs, t):\n    return xs.index(t) if t in xs[:-1] else -1"],
        [
            [[-1, 0, 3, 5, 9, 12], 9],
            [[-1, 0, 3, 5, 9, 12], 2],
            [[5], 5],
            [[], 1],
            [[1, 2, 3], 3],
            [[1, 3, 5, 7], 1],
        ],
        {},
    ),
    (
        "group_anagrams",
        "group_anagrams",
        "def group_anagrams(words):\n    groups = {}\n    for w in words:\n"
        "        groups.setdefault(''.join(sorted(w)), []).append(w)\n"
        "    return sorted(sorted(g) for g in groups.values())",
        ["def group_anagrams(words):\n    return [sorted(words)]"],
        [
            [["eat", "tea", "tan", "ate", "nat", "bat"]],
            [[""]],
            [["a"]],
            [["ab", "ba", "abc"]],
            [["x", "y"]],
            [["abc", "cab", "bca", "d"]],
        ],
        {},
    ),
    (
        "pair_product",
        "pair_product",
        "def pair_product(a, b):\n    return {'sum': a + b, 'product': a * b, 'pair': (a, b)}",
        ["def pair_product(a, b):\n    return {'sum': a + b, 'product': a + b, 'pair': (a, b)}"],
        [[1, 2], [0, 0], [-3, 3], [10, 10], [7, 1], [2, 5]],
        {},
    ),
]


def run_stdio(code: str, stdin: str) -> str:
    out = io.StringIO()
    sys.stdin = io.StringIO(stdin)
    with contextlib.redirect_stdout(out):
        exec(code, {"__name__": "__main__"})
    sys.stdin = sys.__stdin__
    return out.getvalue()


def run_call(code: str, fn: str, args: list) -> object:
    ns: dict = {}
    exec(code, ns)
    target = getattr(ns["Solution"](), fn) if "Solution" in ns else ns[fn]
    value = target(*json.loads(json.dumps(args)))
    return json.loads(json.dumps(value))  # JSON form, as a dataset would store it (tuples become lists)


def main() -> None:
    stdio = [
        {
            "name": n,
            "ground_truth": {
                "inputs": [i + "\n" for i in ins],
                "outputs": [run_stdio(ref, i + "\n") for i in ins],
            },
            "reference": ref,
            "wrong": wrong,
            "options": opts,
        }
        for n, ref, wrong, ins, opts in STDIO
    ]
    call = [
        {
            "name": n,
            "ground_truth": {"fn_name": fn, "inputs": ins, "outputs": [run_call(ref, fn, a) for a in ins]},
            "reference": ref,
            "wrong": wrong,
            "options": opts,
        }
        for n, fn, ref, wrong, ins, opts in CALL
    ]
    (HERE / "code_stdio_suite.json").write_text(json.dumps(stdio, indent=1) + "\n")
    (HERE / "code_call_suite.json").write_text(json.dumps(call, indent=1) + "\n")
    print(f"wrote {len(stdio)} stdio and {len(call)} call-based problems")


if __name__ == "__main__":
    main()
