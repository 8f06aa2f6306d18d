"""sgl-eval's math grading: the last ``\\boxed{}`` of an answer, and equivalence with the expected answer.

A port of ``sgl-eval==0.1.3 sgl_eval/_vendored/nemo_skills/math_grader.py`` (vendored from
NVIDIA/NeMo-Skills@645cf567ff08c0ae9cc3fc8e1edbb975b3067816, ``nemo_skills/evaluation/math_grader.py``;
Copyright (c) 2025 NVIDIA CORPORATION, Apache License 2.0) with the settings sgl-eval's gsm8k uses
(``extract_from_boxed=True``, ``relaxed=False``, no ``take_modulo``). The symbolic comparison is ``math-verify``'s
(``abh[math]``), imported only when needed; its timeout uses SIGALRM, so grading runs in the main thread.
"""

from __future__ import annotations

import re
from typing import Any

from harness.tasks.interface import DatasetError

INSTALL_HINT = "pip install 'abh[math]' (math-verify, as sgl-eval grades)"


def require_math_verify() -> None:
    """DatasetError (one line, exit 2) when math-verify is not installed: checked before any request."""
    try:
        import latex2sympy2_extended  # noqa: F401
        import math_verify  # noqa: F401
    except ImportError:
        raise DatasetError(f"the sgl_eval_chat recipe grades answers with math-verify, which is not installed: "
                           f"{INSTALL_HINT}") from None


def search_boxed(string: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces matched), None when there is none or it is unbalanced."""
    if "\\boxed" not in string:
        return None
    idx = string.rfind("\\boxed")
    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == "{":
            num_left_braces_open += 1
        if string[i] == "}":
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1
    if right_brace_idx is None:
        return None
    retval = string[idx:right_brace_idx + 1]
    left = "\\boxed{"
    if retval and retval[:len(left)] == left and retval[-1] == "}":
        return retval[len(left):-1]
    return None


def _additional_normalization(expr: str) -> str:
    match = re.fullmatch(r"^(\d+\.?\d*)(?:\\%|%)$", expr)  # a percentage: the number alone
    if match:
        expr = match.group(1)
    return expr.rstrip(".\\")  # a full stop ending the sentence


def math_equal(gt_answer: Any, predicted_answer: str | None) -> bool:
    """NeMo-Skills' ``math_equal``: multiple-choice letters, then normalised LaTeX strings, then math-verify."""
    if predicted_answer is None:
        return False
    from latex2sympy2_extended import NormalizationConfig, normalize_latex
    from math_verify import LatexExtractionConfig, StringExtractionConfig, parse, verify

    gt, pred = str(gt_answer), str(predicted_answer)
    options = "ABCDEFGHIJ"
    is_mcq = re.fullmatch("|".join(options), gt.strip())
    parsed_gt = parse(gt, [StringExtractionConfig(strings=tuple(options))])
    parsed_pred = parse(pred, [StringExtractionConfig(strings=tuple(options))])
    if is_mcq and verify(parsed_gt, parsed_pred):
        return bool(verify(parsed_gt, parsed_pred))
    gt, pred = _additional_normalization(gt), _additional_normalization(pred)
    norm_gt, norm_pred = normalize_latex(gt, NormalizationConfig), normalize_latex(pred, NormalizationConfig)
    if norm_gt.replace(" ", "") == norm_pred.replace(" ", ""):
        return True
    text_literal = r"[a-zA-Z ,]+"
    if re.fullmatch(text_literal, norm_gt) and re.fullmatch(text_literal, norm_pred):
        return False
    env = r"\$.*\$|\\\(.*\\\)|\\\[.*\\\]|\\boxed\{"
    if not re.search(env, gt, re.DOTALL):
        gt = f"${gt}$"
    if not re.search(env, pred, re.DOTALL):
        pred = f"${pred}$"
    return bool(verify(parse(gt, [LatexExtractionConfig()]), parse(pred, [LatexExtractionConfig()])))
