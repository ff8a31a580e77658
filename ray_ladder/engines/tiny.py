"""Tiny Llama models made here, for real engines on machines with no model hub: a BPE
tokenizer trained on text Python ships and seeded random weights, saved in Hugging Face's
layout (``config.json``, ``model.safetensors``, ``tokenizer.json`` and a chat template) so
vLLM, Ray Serve LLM and ``transformers`` load them as they load any model.

Two recipes of different size, tokenizer and chat template, so a ladder's rungs can run
models that do not share a tokenizer (docs/llm.md "Real engines"):

| recipe | tokenizer | vocab | hidden x layers | template |
|---|---|---|---|---|
| ``tiny-chatml`` | byte-level BPE on standard-library sources | 4096 | 128 x 2 | ChatML |
| ``tiny-inst`` | Metaspace BPE on standard-library docstrings | 2048 | 64 x 1 | ``[INST]`` |

The weights are random (seeded; wide enough that greedy text does not loop), so the text
is word pieces without meaning; what the models are for is the plumbing: tokens, chat
templates, streams, kills and continuations. The end-of-text token's output row is
zeroed, so greedy decoding never picks it (an answer runs to ``max_tokens``, as tests
and benches need). A model is made once and cached: its folder
name carries a digest of its recipe and of the corpus, so another Python's standard
library makes another folder, never a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
INST = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
        " {{ m['content'] }}{% if not loop.last %}{{ eos_token }}{% endif %}"
        "{% else %}[INST] {{ m['content'] }} [/INST]{% endif %}{% endfor %}")


@dataclass(frozen=True)
class Recipe:
    """How one tiny model is made (every field goes into its cache key)."""

    name: str
    pre_tokenizer: str  # "byte_level" or "metaspace"
    corpus: str  # "sources" (whole .py files) or "docstrings"
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    chat_template: str
    bos: str
    eos: str
    seed: int
    max_position_embeddings: int = 1024
    corpus_files: int = 60
    #: Weights' standard deviation: 10x Llama's 0.02, so that greedy text does not fall
    #: into a loop (113-119 distinct tokens in 120 at 0.2, 11-58 at 0.02).
    init_std: float = 0.2


RECIPES = {
    "tiny-chatml": Recipe("tiny-chatml", "byte_level", "sources", 4096, 128, 2, 4, 2, CHATML,
                          "<|endoftext|>", "<|im_end|>", seed=1),
    "tiny-inst": Recipe("tiny-inst", "metaspace", "docstrings", 2048, 64, 1, 2, 1, INST,
                        "<s>", "</s>", seed=2),
}


def cache_dir() -> Path:
    """Where made models are kept: ``$RAY_LADDER_MODEL_CACHE``, else
    ``~/.cache/ray-ladder/models``."""
    return Path(os.environ.get("RAY_LADDER_MODEL_CACHE")
                or Path.home() / ".cache" / "ray-ladder" / "models")


def _corpus_files(recipe: Recipe) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    return files[:recipe.corpus_files]


def _corpus(recipe: Recipe) -> Iterator[str]:
    """The tokenizer's training text: the files' sources or their docstrings."""
    import ast

    for path in _corpus_files(recipe):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if recipe.corpus == "sources":
            yield text
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    yield doc


def digest(recipe: Recipe) -> str:
    """A short digest of the recipe and of its corpus files (names, sizes)."""
    h = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode())
    for path in _corpus_files(recipe):
        h.update(f"{path.name}:{path.stat().st_size}".encode())
    return h.hexdigest()[:12]


def model_path(name: str) -> Path:
    """The folder of recipe ``name``, made first when it is not cached yet.

    Raises:
        KeyError: no such recipe (the message lists them).
    """
    if name not in RECIPES:
        raise KeyError(f"no tiny model {name!r}: the recipes are {sorted(RECIPES)}")
    recipe = RECIPES[name]
    out = cache_dir() / f"{name}-{digest(recipe)}"
    if not (out / "DONE").exists():
        make(recipe, out)
    return out


def make(recipe: Recipe, out: Path) -> Path:
    """Make ``recipe``'s model in ``out`` (written to a temporary folder, then renamed,
    so a reader never sees half a model)."""
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as err:
        raise ImportError(f"tiny models need torch and transformers, which come with the "
                          f"engine: make engine (python -m ray_ladder.engines.install): "
                          f"{err}", name=err.name) from err

    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(recipe)
    tokenizer.save_pretrained(str(tmp))
    config = LlamaConfig(
        vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size,
        intermediate_size=recipe.hidden_size * 2, num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads, num_key_value_heads=recipe.kv_heads,
        max_position_embeddings=recipe.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        initializer_range=recipe.init_std, tie_word_embeddings=False, dtype="float32")
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # never the end of text under greedy decoding
        for special in {tokenizer.eos_token_id, tokenizer.bos_token_id}:
            model.lm_head.weight[special].zero_()
    model.save_pretrained(str(tmp), safe_serialization=True)
    (tmp / "DONE").write_text(json.dumps(asdict(recipe), indent=1))
    try:
        tmp.rename(out)
    except OSError:  # another process made it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _train_tokenizer(recipe: Recipe):  # type: ignore[no-untyped-def]
    """A fast tokenizer trained on the recipe's corpus, with its specials and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [recipe.bos, recipe.eos, "<unk>"]
    if recipe.chat_template is CHATML:
        specials.append("<|im_start|>")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if recipe.pre_tokenizer == "byte_level":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=recipe.vocab_size, special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_corpus(recipe), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=recipe.bos,
                                   eos_token=recipe.eos, unk_token="<unk>",
                                   pad_token=recipe.eos)
    fast.chat_template = recipe.chat_template
    return fast


def main() -> None:
    """``python -m ray_ladder.engines.tiny [NAME ...]``: make (or find) the models and
    print each one's folder."""
    import sys

    for name in sys.argv[1:] or sorted(RECIPES):
        print(model_path(name), flush=True)


if __name__ == "__main__":
    main()
