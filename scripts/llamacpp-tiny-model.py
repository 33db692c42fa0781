#!/usr/bin/env python3
"""A tiny random-weight model for llama-server that tokenizes and templates like Qwen2.5.

The router's work is about prompts and prefix caches, not about what a model says, so the
weights are random (a few MB, fast on one CPU thread) while everything that decides which
tokens a prompt becomes is real:

- the tokenizer: every `tokenizer.ggml.*` key of llama.cpp's own
  `models/ggml-vocab-qwen2.gguf` (151,936 tokens, BPE merges, token types, the qwen2
  pre-tokenizer, bos/eos/pad), copied as the file declares them;
- the chat template: Qwen2.5-7B-Instruct's, from llama.cpp's `models/templates/`.

The layer shapes are llama's (src/models/llama.cpp, llama_model_llama::load_arch_tensors):
no `output.weight`, so llama.cpp ties the head to `token_embd` (TENSOR_DUPLICATED there).

Run by scripts/engine-llamacpp.ts with PYTHONPATH set to the same source tree's gguf-py;
needs numpy. The same seed writes the same bytes.

usage: llamacpp-tiny-model.py --llama-cpp SRC --out FILE [--seed N]
"""

import argparse
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import quantize
except ImportError as error:
    sys.exit(f"llamacpp-tiny-model: cannot import gguf ({error}); set PYTHONPATH to llama.cpp's gguf-py")

VOCAB = "models/ggml-vocab-qwen2.gguf"
TEMPLATE = "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"

# Small enough that prefill on one thread runs at ~1,000+ tokens/s, so tests can send
# prompts of many thousands of tokens; the context is Qwen2.5's own.
LAYERS = 4
EMBD = 256
FF = 768
HEADS = 4
CONTEXT = 32768


def copy_tokenizer(vocab_path: str, writer: GGUFWriter) -> int:
    """Copy every tokenizer.ggml.* key with the type the vocab file gives it; return n_vocab."""
    reader = GGUFReader(vocab_path)
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, value_type, sub_type)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if n_vocab == 0:
        sys.exit(f"llamacpp-tiny-model: {vocab_path} has no tokenizer.ggml.tokens")
    return n_vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (models/ is read)")
    parser.add_argument("--out", required=True, help="the .gguf file to write")
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()

    head_dim = EMBD // HEADS
    writer = GGUFWriter(args.out, "llama")
    writer.add_name("llmroute tiny random (Qwen2 tokenizer)")
    writer.add_description(
        f"Random weights (seed {args.seed}) for testing serving, routing and prefix caching; output is meaningless. "
        f"Tokenizer from llama.cpp {VOCAB}, chat template from {TEMPLATE}."
    )
    writer.add_block_count(LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBD)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(1_000_000.0)  # Qwen2.5's rope_theta
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    n_vocab = copy_tokenizer(f"{args.llama_cpp}/{VOCAB}", writer)
    writer.add_vocab_size(n_vocab)
    # Qwen2.5 adds no BOS (its tokenizer_config.json: add_bos_token false); saying so keeps
    # llama.cpp from guessing.
    writer.add_add_bos_token(False)
    with open(f"{args.llama_cpp}/{TEMPLATE}", encoding="utf-8") as template:
        writer.add_chat_template(template.read())

    rng = np.random.default_rng(args.seed)

    def weight(rows: int, cols: int) -> np.ndarray:
        """numpy (rows, cols) is GGUF {cols, rows}: llama.cpp's {n_in, n_out}."""
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(EMBD, dtype=np.float32)

    # The embedding is most of the file (151,936 x 256): Q8_0 keeps it near 40 MB.
    embedding = rng.standard_normal((n_vocab, EMBD), dtype=np.float32) * 0.02
    writer.add_tensor("token_embd.weight", quantize(embedding, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", norm())
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", norm())
        writer.add_tensor(f"{block}.attn_q.weight", weight(HEADS * head_dim, EMBD))
        writer.add_tensor(f"{block}.attn_k.weight", weight(HEADS * head_dim, EMBD))
        writer.add_tensor(f"{block}.attn_v.weight", weight(HEADS * head_dim, EMBD))
        writer.add_tensor(f"{block}.attn_output.weight", weight(EMBD, HEADS * head_dim))
        writer.add_tensor(f"{block}.ffn_norm.weight", norm())
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(FF, EMBD))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(FF, EMBD))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(EMBD, FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out}: llama, {LAYERS} layers, n_embd {EMBD}, ff {FF}, {HEADS} heads, context {CONTEXT}, vocab {n_vocab}")


if __name__ == "__main__":
    main()
