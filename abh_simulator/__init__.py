"""SIMULATED engine: a GSM8K-serving "LLM" HTTP server for rehearsals, tests and power planning.

It is NOT a model. It speaks SGLang's native API (``POST /generate``) and OpenAI's (``POST /v1/completions``)
plus the usual side endpoints, and answers GSM8K test questions correctly with a per-question probability.
Everything it reports says ``simulated``. Start it as a real process::

    python -m abh_simulator --port 30000 --accuracy 0.95 --build fix

Modules: ``config`` (SimConfig: every knob and its default), ``model`` (question difficulties, an arm's
outcomes, run-to-run noise), ``text`` (the answers it writes), ``state`` (one launch: data, outcomes per pass,
generation), ``tokens`` (toy tokenizer), ``logprobs`` (next-token model for teacher-forced scoring),
``experts`` (MoE routing for ``return_routed_experts``), ``hashing`` (stable hashes they share),
``protocol`` (SGLang and OpenAI/vLLM request and response shapes, documented there), ``server`` (handlers and
routes), ``httpd`` (the lean HTTP/1.1 server they run on), ``__main__`` (command line -> SimConfig).

A request's question is the LAST ``Question: ...\\nAnswer:`` block of its prompt
(:func:`harness.tasks.gsm8k.question_from_prompt`); unknown questions get a random (wrong) number. Output
text is a GSM8K-style rationale ending in ``#### N`` followed, like a base model, by hallucinated next
``Question: ...`` blocks and then EOS; stop strings (``"Question"`` in SGLang's recipe) trim it, and
``max_new_tokens`` truncates it.

This package imports nothing heavy: the server itself lives in ``abh_simulator.server``.
"""

from abh_simulator.sim_config import SimConfig

__all__ = ["SimConfig"]
