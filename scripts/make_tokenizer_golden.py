#!/usr/bin/env python3
"""Golden token ids for octet's GGUF tokenizers (tests/models/test_tokenizer_golden.cpp).

The reference is Hugging Face `tokenizers`/`transformers` reading the SAME GGUF files that the
C++ reads, never octet itself. Usage (the venv needs transformers, tokenizers, gguf,
sentencepiece):

    /work/venv/bin/python scripts/make_tokenizer_golden.py \
        --stories ../shared/models/stories260K.gguf \
        --smollm2 ~/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out tests/models/golden

Writes tokenizer_stories260K.json and tokenizer_smollm2.json. Each case holds the text and
  "ids":    {"bos_parse", "bos_noparse", "nobos_parse", "nobos_noparse"}
            = encode(text, add_special=BOS?, parse_special=match special-token texts?)
  "decode": {"skip_special", "keep_special"} = decode(ids["bos_parse"], skip_special_tokens=...)
plus, where a second implementation was consulted, its ids for comparison (see "notes"), and
for SmolLM2 the pre-tokenizer pieces ("pretokens": reference = "smollm"; "hf_gguf_pretokens":
plain GPT-2 ByteLevel), spelled in the byte-level alphabet.

What transformers' GGUF conversion builds (checked with backend_tokenizer.to_str(), transformers
5.x) and what we do about it:

stories260K (tokenizer.ggml.model = "llama", no merges in the file):
  - BPE model with byte_fallback=True; merges are DERIVED from vocab + scores
    (transformers' generate_merges: every split of every token into two vocab tokens, ordered by
    the merged token's score descending, then by len(left), len(right) descending, ties in vocab
    order). No normalizer. Pre-tokenizer Metaspace(replacement="▁", prepend_scheme="first",
    split=False): spaces become "▁" and one "▁" is prepended, but only to the text's first
    segment (offset 0) and only when that does not already start with "▁". So "  Hello" gives
    "▁▁Hello", and text after a special token gets no prefix. Post-processor: BOS (<s>, id 1);
    add_bos defaults to True for "llama" files without tokenizer.ggml.add_bos_token (as
    llama.cpp). Added special tokens: <unk>, <s>, </s>. Decoder: "▁"->" ", ByteFallback, Fuse,
    Strip one leading space.
  - This file stores tokenizer.ggml.padding_token_id = seperator_token_id = 4294967295 (i.e. -1,
    "none"); transformers' GGUF reader indexes the vocabulary with it and crashes, so this script
    drops out-of-range special ids before the conversion (they mean "none" in llama.cpp).
  - The model's own tokenizer is SentencePiece (llama2.c), which adds the dummy prefix
    unconditionally ("  Hello" -> "▁▁▁Hello") and does not know special tokens in text; llama.cpp
    also adds the prefix unconditionally and again after every special token. octet follows the
    HF conversion (the project's reference); for visibility each case also records "spm_ids": what
    real sentencepiece gives for a ModelProto built from the same GGUF (BPE, scores, piece types,
    byte_fallback, add_dummy_prefix=True, remove_extra_whitespaces=False, identity normalizer),
    encoded without BOS and without special-token parsing. They differ from nobos_noparse only
    for text that starts with a space (or a literal "▁").

SmolLM2 (tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "smollm"):
  - transformers' conversion builds GPT2Tokenizer: BPE over vocab + merges from the file,
    ByteLevel(add_prefix_space=False, use_regex=True) pre-tokenizer, ByteLevel decoder, control
    tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ...) as special added tokens, no BOS
    (tokenizer.ggml.add_bos_token = false). It IGNORES tokenizer.ggml.pre = "smollm" (it has no
    entry for it), so it does NOT split digits individually.
  - "smollm" in llama.cpp (LLAMA_VOCAB_PRE_TYPE_SMOLLM) means two regexes: "\\p{N}" first, then
    the GPT-2 pattern; SmolLM2's real tokenizer.json has the same effect:
    Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)].
    The difference shows where digits follow spaces: "  3" pre-tokenizes to ["Ġ", "Ġ3"]
    without the digit split but to ["ĠĠ", "3"] with it (different ids), and on numeric
    characters such as "½²" that the GPT-2 pattern keeps together.
  - So the reference here is HF's conversion with the pre-tokenizer replaced by the one the real
    tokenizer.json has (same vocab, merges, added tokens, decoder). Each case also records
    "hf_gguf_ids" (HF's unmodified GGUF conversion, bos_parse mode) so the difference is visible.
"""
import argparse
import json
import os
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import pre_tokenizers

# At least 40 tricky strings. JSON-safe (valid Unicode only; invalid UTF-8 is a C++ unit test).
CASES = [
    "",
    " ",
    "  ",
    "        ",
    " Hello",
    "  Hello",
    "   Hello",
    "Hello",
    "Hello world",
    "Hello, world!",
    "\t",
    "\n",
    "\n\n\n",
    " \t \n \r\n",
    "a\tb\tc",
    "line1\nline2\r\nline3",
    "12345 3.14159 1,000,000",
    "  3 apples and  42 pears",
    "x=10; y = 20.5e-3",
    "2024-01-01T12:34:56Z",
    "!!! ??? ... --- ***",
    "(a) [b] {c} <d> \"e\" 'f'",
    "don't I'll we're they've she'd it's",
    "DON'T I'LL WE'RE",
    "café naïve résumé Ångström",
    "Ελληνικά и русский язык",
    "日本語のテキスト",
    "你好，世界！",
    "한국어 텍스트",
    "😀",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 flag and 👍🏽 ok",
    "mixed: English, 中文, العربية, हिन्दी, עברית",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<s>Hello</s>",
    "<s> Hello</s>",
    "<unk>",
    "text<|endoftext|>more",
    "<|im_start|",
    "<|im_end|><|im_end|>",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious",
    "Once upon a time, there was a little girl named Lily.",
    "    def foo(x):\n        return x * 2\n",
    "a\u00a0b\u3000c",
    "a\u0085\u0085b c",
    "ws\u2028\u2028mix\u000b\u000c\u001c\u001c end",
    "x\u180e\u180ey \u180e\u2000z\u205f",
    "e\u0301 combining",
    "\u2581starts with the block",
    "https://example.com/path?q=1&r=two#frag",
    "\u00bd \u00b2 \u0663\u0664 Ⅻ",
    "ends with spaces   ",
    "MiXeD CaSe WORDS",
    "tab\t\tseparated  double  spaces",
    "Zero\u200bwidth",
    "<0x41> is not a byte",
    "a" * 100,
]

MODES = {
    "bos_parse": (True, True),
    "bos_noparse": (True, False),
    "nobos_parse": (False, True),
    "nobos_noparse": (False, False),
}


def patch_invalid_special_ids():
    """llama.cpp writes 4294967295 (-1) for "no such token"; transformers' reader indexes the
    vocabulary with it. Drop out-of-range *_token_id keys before the conversion sees them."""
    import transformers.integrations.gguf.reader as reader

    original = reader.read_gguf_metadata

    def read(path, *args, **kwargs):
        metadata, rest = original(path, *args, **kwargs)
        tokens = metadata.get("tokenizer.ggml.tokens")
        n = len(tokens) if isinstance(tokens, list) else int(tokens or 0)
        for key in list(metadata):
            if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"):
                if not 0 <= int(metadata[key]) < n:
                    del metadata[key]
        return metadata, rest

    reader.read_gguf_metadata = read


def load_hf(path):
    """transformers' own GGUF conversion (AutoTokenizer.from_pretrained(dir, gguf_file=name))."""
    directory = tempfile.mkdtemp(prefix="octet_tok_")
    name = os.path.basename(path)
    os.symlink(os.path.abspath(path), os.path.join(directory, name))
    return transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)


def encode(backend, text, add_special, parse_special):
    backend.encode_special_tokens = not parse_special
    try:
        return backend.encode(text, add_special_tokens=add_special).ids
    finally:
        backend.encode_special_tokens = False


def describe(backend):
    d = json.loads(backend.to_str())
    model = {k: v for k, v in d["model"].items() if k not in ("vocab", "merges")}
    return {
        "normalizer": d["normalizer"],
        "pre_tokenizer": d["pre_tokenizer"],
        "post_processor": d["post_processor"],
        "decoder": d["decoder"],
        "model": model,
        "num_merges": len(d["model"].get("merges") or []),
        "added_tokens": [(t["id"], t["content"], t["special"]) for t in d["added_tokens"]],
    }


def check_transformers_api(hf, backend):
    """The backend calls above must agree with the transformers API users call."""
    for text in CASES:
        assert hf.encode(text) == encode(backend, text, True, True), text
        assert hf.encode(text, add_special_tokens=False) == encode(backend, text, False, True), text
        assert hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] == \
            encode(backend, text, False, False), text
        ids = hf.encode(text)
        for skip in (True, False):
            assert hf.decode(ids, skip_special_tokens=skip) == \
                backend.decode(ids, skip_special_tokens=skip), text


def spm_from_gguf(path):
    """Real sentencepiece over a ModelProto built from the GGUF vocab (informational only)."""
    import gguf
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    r = gguf.GGUFReader(path)

    def array(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in array("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in array("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in array("tokenizer.ggml.token_type")]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(tokens)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id = 0, 1, 2
    m.trainer_spec.pad_id = -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def make_cases(backend):
    out = []
    for text in CASES:
        ids = {mode: encode(backend, text, *flags) for mode, flags in MODES.items()}
        out.append({
            "text": text,
            "ids": ids,
            "decode": {
                "skip_special": backend.decode(ids["bos_parse"], skip_special_tokens=True),
                "keep_special": backend.decode(ids["bos_parse"], skip_special_tokens=False),
            },
        })
    return out


def header(path, reference, hf_backend, ref_backend, notes):
    return {
        "gguf": os.path.basename(path),
        "generator": "scripts/make_tokenizer_golden.py",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "reference": reference,
        "notes": notes,
        "hf_gguf_pipeline": describe(hf_backend),
        "reference_pipeline": describe(ref_backend),
    }


def stories(path):
    hf = load_hf(path)
    backend = hf.backend_tokenizer
    check_transformers_api(hf, backend)
    sp = spm_from_gguf(path)
    cases = make_cases(backend)
    differ = []
    for case in cases:
        case["spm_ids"] = sp.encode(case["text"])
        if case["spm_ids"] != case["ids"]["nobos_noparse"]:
            differ.append(case["text"])
    notes = [
        "Reference = transformers' GGUF conversion unchanged (Metaspace prepend_scheme=first, "
        "derived merges, byte_fallback, BOS 1); add_bos defaults to true.",
        "spm_ids = real sentencepiece on a ModelProto from the same vocab/scores "
        "(add_dummy_prefix, no BOS, no special parsing); informational, not tested.",
        "Texts where spm_ids differ from nobos_noparse: " + json.dumps(differ, ensure_ascii=False),
    ]
    doc = header(path, "transformers AutoTokenizer(gguf_file=...) backend", backend, backend, notes)
    doc["cases"] = cases
    return doc


def smollm2(path):
    hf = load_hf(path)
    hf_backend = hf.backend_tokenizer
    check_transformers_api(hf, hf_backend)
    pre = json.loads(hf_backend.to_str())["pre_tokenizer"]
    assert pre["type"] == "ByteLevel", pre  # HF ignores tokenizer.ggml.pre = "smollm"

    # The real SmolLM2 pre-tokenizer on HF's converted vocab/merges/added tokens/decoder.
    ref = tokenizers.Tokenizer.from_str(hf_backend.to_str())
    ref.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    cases = make_cases(ref)
    differ = []
    for case in cases:
        # Pre-tokenizer pieces (byte-level spelling) of both pipelines, to test the regex layer.
        case["pretokens"] = [p for p, _ in ref.pre_tokenizer.pre_tokenize_str(case["text"])]
        case["hf_gguf_pretokens"] = [
            p for p, _ in hf_backend.pre_tokenizer.pre_tokenize_str(case["text"])]
        case["hf_gguf_ids"] = encode(hf_backend, case["text"], True, True)
        if case["hf_gguf_ids"] != case["ids"]["bos_parse"]:
            differ.append(case["text"])
    notes = [
        "Reference = transformers' GGUF conversion with its pre-tokenizer replaced by "
        "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, "
        "use_regex=True)], as SmolLM2's tokenizer.json and llama.cpp's pre-type 'smollm' do; "
        "transformers' conversion ignores tokenizer.ggml.pre.",
        "hf_gguf_ids = transformers' unmodified GGUF conversion (bos_parse); informational.",
        "Texts where hf_gguf_ids differ from the reference: " + json.dumps(differ, ensure_ascii=False),
    ]
    doc = header(path, "tokenizers: HF GGUF conversion + smollm pre-tokenizer", hf_backend, ref,
                 notes)
    doc["cases"] = cases
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stories", required=True)
    ap.add_argument("--smollm2", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    patch_invalid_special_ids()
    os.makedirs(args.out, exist_ok=True)
    for name, doc in (("tokenizer_stories260K.json", stories(args.stories)),
                      ("tokenizer_smollm2.json", smollm2(args.smollm2))):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(name, len(doc["cases"]), "cases;", doc["notes"][-1], file=sys.stderr)


if __name__ == "__main__":
    main()
