"""A Hugging Face model whose attention runs through scaled_dot_product_attention's masked
path, which falls back on the TorchScript backend: the model built with
`attn_implementation="eager"` (the config or from_pretrained call in the user's file),
whose attention lowers and gives the same logits (checked with BERT on torch 2.13)."""
from __future__ import annotations

import ast
import os

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.fix.source import Context, Proposal, Source, keyword_set

SDPA_LINE = "transformers/integrations/sdpa_attention.py"  # where transformers calls it
# Configs that are not a model's (generation, adapters, quantization, training): never given attn_implementation.
_NOT_MODELS = ("Generation", "Lora", "Peft", "BitsAndBytes", "Quanto", "Gptq", "Awq", "Training", "Quantization")


def _model_calls(source: Source) -> list[ast.Call]:
    """Calls that build a model's config or load a model: `BertConfig(...)`,
    `AutoModel.from_pretrained(...)`, `...from_config(...)`."""
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if (name.endswith("Config") and name != "Config" and not name.startswith(_NOT_MODELS)) \
                or name in ("from_pretrained", "from_config"):
            found.append(node)
    return found


def propose(finding: Finding, context: Context) -> Proposal:
    files = dict.fromkeys([*(frame.file for frame in context.stack(finding)), *context.run.info.sources])
    calls = [(source, call) for file in files if (source := context.source(file)) is not None
             for call in _model_calls(source)]
    if len(calls) != 1:
        why = "no config or from_pretrained call in your files" if not calls else \
            f"{len(calls)} config or from_pretrained calls: give the model's attn_implementation=\"eager\""
        return Proposal(finding, f"{finding.fix} ({why})")
    source, call = calls[0]
    keyword = next((k for k in call.keywords if k.arg == "attn_implementation"), None)
    if keyword is not None and isinstance(keyword.value, ast.Constant) and keyword.value.value == "eager":
        return Proposal(finding, finding.fix)
    change = keyword_set(source, call, "attn_implementation", '"eager"')
    if change is None:
        return Proposal(finding, f"{finding.fix} (set attn_implementation=\"eager\" at {source.at(call.lineno)})")
    return Proposal(finding, f"attn_implementation=\"eager\" on the model at {os.path.basename(source.path)}:"
                             f"{call.lineno}: its attention is then written from ops that lower, with the same "
                             "results, instead of scaled_dot_product_attention's masked path, which falls back",
                    (change,))


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FallbackDetails) and (finding.details.library_line or "").startswith(SDPA_LINE)
