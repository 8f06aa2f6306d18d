"""What SGLang's frontend (``sglang.lang``) adds to a ``/generate`` request of its own: the chat template's stop
strings, chosen by the model path the server reports.

Upstream: ``sglang==0.5.23 python/sglang/lang/chat_template.py`` (the templates' ``stop_str`` and the matching
functions, tried in registration order; the first that names a template wins, else ``default``) and
``python/sglang/lang/interpreter.py`` (``clone.stop += self.chat_template.stop_str``: every stop string of the
template is appended to the program's own, in the template's order, without removing duplicates).
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Each template's ``stop_str`` (templates without one are absent: they add nothing).
TEMPLATE_STOPS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_end|>",),
    "chatml-llava": ("<|im_end|>",),
    "qwen": ("<|im_end|>",),
    "qwen2-vl": ("<|im_end|>",),
    "mistral": ("</s>",),
    "llama-3-instruct": ("<|eot_id|>",),
    "minicpmv": ("<|im_end|>", "<|endoftext|>"),
    "janus-pro": ("<｜end▁of▁sentence｜>",),
    "minicpmo": ("<|im_end|>", "<|endoftext|>"),
    "janus": ("<｜end▁of▁sentence｜>",),
    "llama-3-instruct-llava": ("<|eot_id|>",),
    "llama-4": ("<|eot|>",),
    "yi-1.5": ("<|im_end|>",),
    "dbrx-instruct": ("<|im_end|>",),
    "internvl-2-5": ("<|im_end|>", "<|action_end|>"),
    "interns1": ("<|im_end|>", "<|action_end|>"),
    "granite-3-instruct": ("<|end_of_text|>",),
    "deepseek-v3": ("<｜end▁of▁sentence｜>",),
    "glm-4v": ("<|user|>", "<|endoftext|>", "<|observation|>"),
}


def _s(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None


def _deepseek(m: str) -> str | None:
    return "deepseek-v3" if _s(r"deepseek-(v3|r1)", m) and not _s(r"base", m) else None


def _orion(m: str) -> str | None:
    return "claude" if "orion" in m.lower() else None


def _janus(m: str) -> str | None:
    return "janus-pro" if _s(r"janus", m) else None


def _dbrx(m: str) -> str | None:
    return "dbrx-instruct" if _s(r"dbrx", m) and _s(r"instruct", m) else None


def _vicuna(m: str) -> str | None:
    return "vicuna_v1.1" if _s(r"vicuna|llava-v1\.5|llava-next-video-7b", m) else None


def _llama2(m: str) -> str | None:
    return "llama-2-chat" if _s(r"llama-2.*chat|codellama.*instruct", m) else None


def _mistral(m: str) -> str | None:
    return "mistral" if _s(r"pixtral|(mistral|mixtral).*instruct", m) else None


def _llama3(m: str) -> str | None:
    return "llama-3-instruct" if _s(r"llama-3.*instruct", m) else None


def _chatml(m: str) -> str | None:
    if _s(r"tinyllama", m):
        return "chatml"
    if _s(r"qwen.*vl", m):
        return "qwen2-vl"
    if _s(r"glm[-_]?4(\.\d+)?v", m):
        return "glm-4v"
    if _s(r"qwen.*(chat|instruct)", m) and not _s(r"llava", m):
        return "qwen"
    if _s(r"llava-v1\.6-34b|llava-v1\.6-yi-34b|llava-next-video-34b|llava-onevision-qwen2", m):
        return "chatml-llava"
    return None


def _yi(m: str) -> str | None:
    if _s(r"yi-vl", m) and not _s(r"llava", m):
        return "yi-vl"
    return "yi-1.5" if _s(r"yi-1\.5.*chat", m) else None


def _gemma(m: str) -> str | None:
    if _s(r"gemma-4.*it", m):
        return "gemma-4-it"
    return "gemma-it" if _s(r"(gemma.*it)|(gemma-3)", m) else None


def _minicpm(m: str) -> str | None:
    if _s(r"minicpm-v", m):
        return "minicpmv"
    return "minicpmo" if _s(r"minicpm-o", m) else None


def _command_r(m: str) -> str | None:
    return "c4ai-command-r" if _s(r"c4ai-command-r", m) else None


def _granite(m: str) -> str | None:
    return "granite-3-instruct" if _s(r"granite.*instruct", m) else None


def _internvl(m: str) -> str | None:
    return "internvl-2-5" if _s(r"internvl2_5", m) else None


def _interns1(m: str) -> str | None:
    return "interns1" if _s(r"intern-s1", m) or _s(r"interns1", m) else None


#: The matching functions in SGLang's registration order.
MATCHERS: tuple[Callable[[str], str | None], ...] = (
    _deepseek, _orion, _janus, _dbrx, _vicuna, _llama2, _mistral, _llama3, _chatml, _yi, _gemma, _minicpm,
    _command_r, _granite, _internvl, _interns1)


def chat_template_for(model_path: str | None) -> str:
    """The name of the chat template SGLang's frontend picks for ``model_path`` (``default`` when none matches)."""
    if model_path:
        for match in MATCHERS:
            name = match(model_path)
            if name is not None:
                return name
    return "default"


def chat_stops_for_model(model_path: str | None) -> tuple[str, ...]:
    """The stop strings SGLang's frontend appends for ``model_path`` (its chat template's ``stop_str``)."""
    return TEMPLATE_STOPS.get(chat_template_for(model_path), ())
