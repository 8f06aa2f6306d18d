"""Four-choice questions as openai/simple-evals asks and reads them (MMLU, GPQA).

Upstream: ``openai/simple-evals common.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e`` (MIT licence), and SGLang's
copy of it (``sglang<=0.5.18 python/sglang/test/simple_eval_common.py``: the same template, the pattern
``(?i)Answer\\s*:\\s*([A-D])`` on the raw response).
"""

from __future__ import annotations

import re

QUERY_TEMPLATE_MULTICHOICE = """
Answer the following multiple choice question. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering.

{Question}

A) {A}
B) {B}
C) {C}
D) {D}
""".strip()

#: simple-evals' pattern (GPQA reads with it: ``re.search``, the first match)
ANSWER_PATTERN_MULTICHOICE = r"(?i)Answer[ \t]*:[ \t]*\$?([A-D])\$?"
#: SGLang's run_eval pattern (MMLU and GPQA, on the raw response)
SGLANG_ANSWER_PATTERN = r"(?i)Answer\s*:\s*([A-D])"
MULTILINGUAL_ANSWER_PATTERN_TEMPLATE = "(?i){}[ \t]*([A-D]|[أ-د]|[অ]|[ব]|[ড]|[ঢ]|[Ａ]|[Ｂ]|[Ｃ]|[Ｄ])"
#: Every way "Answer" is written, in simple-evals' order (MMLU tries them in turn: the first that matches wins).
MULTILINGUAL_ANSWER_REGEXES = (
    'Answer\\s*:', 'Answer\\s*:\u200b\u200b\u200b\u200b\u200b\u200b', '\u0989\u09a4\u09cd\u09a4\u09b0\\s*:',
    '\u0909\u0924\u094d\u0924\u0930\\s*:', '\u0989\u09a4\u09cd\u09a4\u09b0\u0983',
    '\u0989\u09a4\u09cd\u09a4\u09b0\\s*:', 'Antwort\\s*:', '\ub2f5\ubcc0\\s*:', '\uc815\ub2f5\\s*:',
    '\ub2f5\\s*:', '\u7b54\u6848\\s*\uff1a', '\u7b54\u6848\\s*:', '\u7b54\\s*\uff1a', '\u7b54\\s*:',
    '\u7b54\u590d\\s*\uff1a', '\u7b54\u66f0\\s*\uff1a', '\u0627\u0644\u0625\u062c\u0627\u0628\u0629:',
    '\u0627\u0644\u062c\u0648\u0627\u0628:', '\u0625\u062c\u0627\u0628\u0629:',
    '\u0627\u0644\u0625\u062c\u0627\u0628\u0629 \u0627\u0644\u0646\u0647\u0627\u0626\u064a\u0629:',
    '\u0627\u0644\u0625\u062c\u0627\u0628\u0629 \u0627\u0644\u0635\u062d\u064a\u062d\u0629:',
    '\u0627\u0644\u0625\u062c\u0627\u0628\u0629 \u0627\u0644\u0635\u062d\u064a\u062d\u0629 \u0647\u064a:',
    '\u0627\u0644\u0625\u062c\u0627\u0628\u0629 \u0647\u064a:',
    '\u0627\u0644\u062c\u0648\u0627\u0628 \u0627\u0644\u0646\u0647\u0627\u0626\u064a:', 'Respuesta\\s*:',
    'Risposta\\s*:', '\u7b54\u3048\\s*:', '\u7b54\u3048\\s*\uff1a', '\u56de\u7b54\\s*:',
    '\u56de\u7b54\\s*\uff1a', '\u89e3\u7b54\\s*:', 'Jawaban\\s*:', 'R\xe9ponse\\s*:', 'Resposta\\s*:',
    'Jibu\\s*:', 'Idahun\\s*:', '\xccd\xe1h\xf9n\\s*:', 'Id\xe1h\xf9n\\s*:',
    'A\u0300m\u1ecd\u0300na\u0300\\s*:', '\xc0d\xe1h\xf9n\\s*:', 'A\u0300nu\u0301go\u0323\\s*:',
    '\xc0\u1e63\xe0y\xe0n\\s*:',
)


def format_question(question: str, a: str, b: str, c: str, d: str) -> str:
    """``format_multichoice_question``: the template with the question and its four choices."""
    return QUERY_TEMPLATE_MULTICHOICE.format(Question=question, A=a, B=b, C=c, D=d)


def normalize_response(response: str) -> str:
    """Markdown and LaTeX wrappers removed, in simple-evals' order."""
    return (response.replace("**", "").replace("$\\boxed{", "").replace("}$", "").replace("\\$", "")
            .replace("$\\text{", "").replace("$", "").replace("\\mathrm{", "").replace("\\{", "")
            .replace("\\text", "").replace("\\(", "").replace("\\mathbf{", "").replace("{", "")
            .replace("\\boxed", ""))


def normalize_extracted_answer(extracted: str) -> str:
    """Arabic, Bengali and full-width letters as A-D (with simple-evals' leading space, then stripped)."""
    return (extracted.replace("أ", " A").replace("ب", " B").replace("ج", " C").replace("د", " D")
            .replace("অ", " A").replace("ব", " B").replace("ড", " C").replace("ঢ", " D")
            .replace("Ａ", " A").replace("Ｂ", " B").replace("Ｃ", " C").replace("Ｄ", " D").strip())


def extract_simple_evals_mmlu(response: str) -> str | None:
    """simple-evals' MMLU reading: the normalised response, the answer regexes in turn, the first match."""
    text = normalize_response(response)
    for answer_regex in MULTILINGUAL_ANSWER_REGEXES:
        match = re.search(MULTILINGUAL_ANSWER_PATTERN_TEMPLATE.format(answer_regex), text)
        if match:
            return normalize_extracted_answer(match.group(1))
    return None


def extract_first(pattern: str, response: str) -> str | None:
    """``re.search(pattern, response)``'s group 1 (simple-evals' GPQA, SGLang's run_eval)."""
    match = re.search(pattern, response)
    return match.group(1) if match else None
