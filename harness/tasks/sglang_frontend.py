"""The stop strings SGLang's frontend (``sglang.lang``) adds to its ``/generate`` requests: the chat template's,
chosen by the model path the server reports.

Upstream: ``sglang==0.5.23 python/sglang/lang/chat_template.py`` (the templates' ``stop_str``; matching functions
tried in registration order, the first that names a template wins, else ``default``) and
``python/sglang/lang/interpreter.py`` (``clone.stop += self.chat_template.stop_str``: appended to the program's
own, in the template's order, duplicates kept).
"""

from __future__ import annotations

import re

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


#: SGLang's matching functions in registration order, one row per template a function can name, in the order it
#: tries them: (template, patterns that must all match, patterns that must not), searched case-insensitively.
MATCHERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("deepseek-v3", (r"deepseek-(v3|r1)",), (r"base",)),
    ("claude", (r"orion",), ()),
    ("janus-pro", (r"janus",), ()),
    ("dbrx-instruct", (r"dbrx", r"instruct"), ()),
    ("vicuna_v1.1", (r"vicuna|llava-v1\.5|llava-next-video-7b",), ()),
    ("llama-2-chat", (r"llama-2.*chat|codellama.*instruct",), ()),
    ("mistral", (r"pixtral|(mistral|mixtral).*instruct",), ()),
    ("llama-3-instruct", (r"llama-3.*instruct",), ()),
    ("chatml", (r"tinyllama",), ()),
    ("qwen2-vl", (r"qwen.*vl",), ()),
    ("glm-4v", (r"glm[-_]?4(\.\d+)?v",), ()),
    ("qwen", (r"qwen.*(chat|instruct)",), (r"llava",)),
    ("chatml-llava", (r"llava-v1\.6-34b|llava-v1\.6-yi-34b|llava-next-video-34b|llava-onevision-qwen2",), ()),
    ("yi-vl", (r"yi-vl",), (r"llava",)),
    ("yi-1.5", (r"yi-1\.5.*chat",), ()),
    ("gemma-4-it", (r"gemma-4.*it",), ()),
    ("gemma-it", (r"(gemma.*it)|(gemma-3)",), ()),
    ("minicpmv", (r"minicpm-v",), ()),
    ("minicpmo", (r"minicpm-o",), ()),
    ("c4ai-command-r", (r"c4ai-command-r",), ()),
    ("granite-3-instruct", (r"granite.*instruct",), ()),
    ("internvl-2-5", (r"internvl2_5",), ()),
    ("interns1", (r"intern-s1|interns1",), ()),
)


def chat_template_for(model_path: str | None) -> str:
    """The name of the chat template SGLang's frontend picks for ``model_path`` (``default`` when none matches)."""
    if model_path:
        for name, needed, excluded in MATCHERS:
            if (all(re.search(p, model_path, re.IGNORECASE) for p in needed)
                    and not any(re.search(p, model_path, re.IGNORECASE) for p in excluded)):
                return name
    return "default"


def chat_stops_for_model(model_path: str | None) -> tuple[str, ...]:
    """The stop strings SGLang's frontend appends for ``model_path`` (its chat template's ``stop_str``)."""
    return TEMPLATE_STOPS.get(chat_template_for(model_path), ())
