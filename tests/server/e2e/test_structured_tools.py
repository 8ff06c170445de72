"""Structured outputs and tool calling end to end: the official openai client (unchanged)
against `octet serve` with SmolLM2-135M on the engine's xgrammar constraints.

- response_format=PydanticModel through client.chat.completions.parse for the twenty models of
  schemas20.py: every reply parses into the model (the constraint, not the model's skill).
- regex and choice constraints (vLLM's structured_outputs, the older guided_* fields, llama.cpp's
  grammar): every reply matches, over several seeds at temperature 1.
- tool_choice "required" and a named function: 20 tries each, streamed (the client's
  chat.completions.stream helper accumulates the tool_call deltas) and not; the arguments always
  validate against the function's JSON schema (jsonschema).
- tool_choice "auto" with --tool-call-parser hermes: SmolLM2 is not trained on tool calls, so the
  output is made to be a Hermes tool call by a regex constraint on the same request (vLLM allows
  structured outputs with "auto"); the parser then has to find it, streamed and not. The auto path
  without a constraint is checked for consistency (tool_calls exactly when the text had a call).
"""
import concurrent.futures
import json
import os
import re

import jsonschema
import pytest

from conftest import MODEL_NAME, Server
import schemas20

HERE = os.path.dirname(os.path.abspath(__file__))

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 20},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time in Berlin?"}]
TRIES = 20


def check_calls(tool_calls, names):
    """Each call names one of `names`, has an id and arguments that validate."""
    assert tool_calls, "no tool calls"
    for call in tool_calls:
        assert call.type == "function"
        assert call.id
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMA_OF[call.function.name])


# vLLM's option for compact JSON: with any whitespace allowed (the default, as in vLLM),
# disable_any_whitespace: compact JSON. The pydantic cases send nothing extra (the unchanged
# client's parse()); octet bounds any-whitespace runs (engine/structured_output.h), without which
# SmolLM2 at temperature 0 wrote newlines until max_tokens on some schemas.
COMPACT = {"structured_outputs": {"disable_any_whitespace": True}}


@pytest.mark.parametrize("model", schemas20.MODELS, ids=lambda m: m.__name__)
def test_parse_pydantic_schemas(client, model):
    completion = client.chat.completions.parse(
        model=MODEL_NAME, temperature=0, max_tokens=600,
        messages=[{"role": "user", "content": f"Give me an example of a {model.__name__} as JSON."}],
        response_format=model)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, model), message.content
    assert model.model_validate_json(message.content) == message.parsed


def test_json_object_and_completions_json_schema(client):
    # Any object: its strings are unbounded, so only a finished one must parse.
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "A JSON object about a cat."}],
        response_format={"type": "json_object"}, max_tokens=300, temperature=0, extra_body=COMPACT)
    assert r.choices[0].message.content.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    # /v1/completions with response_format json_schema (vLLM accepts it there too).
    schema = schemas20.Weather.model_json_schema()
    c = client.completions.create(
        model=MODEL_NAME, prompt="Weather report as JSON:", max_tokens=300, temperature=0,
        extra_body={"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "w", "schema": schema}},
                    **COMPACT})
    schemas20.Weather.model_validate_json(c.choices[0].text)


REGEX = r"[a-z]{2,10}@(example|test)\.(com|org)"


@pytest.mark.parametrize("body", [
    {"structured_outputs": {"regex": REGEX}},
    {"guided_regex": REGEX},
], ids=["structured_outputs", "guided_regex"])
def test_regex_always_matches(client, body):
    for seed in range(5):
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "An email address?"}],
            temperature=1.0, seed=seed, max_tokens=64, extra_body=body)
        assert re.fullmatch(REGEX, r.choices[0].message.content), r.choices[0].message.content
    c = client.completions.create(model=MODEL_NAME, prompt="Email:", temperature=1.0, seed=7,
                                  max_tokens=64, extra_body=body)
    assert re.fullmatch(REGEX, c.choices[0].text)


def test_choice_and_grammar_always_match(client):
    choices = ["positive", "negative", "neutral"]
    for seed in range(5):
        for body in ({"structured_outputs": {"choice": choices}}, {"guided_choice": choices}):
            r = client.chat.completions.create(
                model=MODEL_NAME, temperature=1.0, seed=seed, max_tokens=16, extra_body=body,
                messages=[{"role": "user", "content": "Sentiment of: I love it!"}])
            assert r.choices[0].message.content in choices
    # llama.cpp's GBNF grammar field.
    grammar = 'root ::= "(" [0-9] [0-9]? " + " [0-9] ")"'
    for seed in range(3):
        r = client.chat.completions.create(
            model=MODEL_NAME, temperature=1.0, seed=seed, max_tokens=16,
            messages=[{"role": "user", "content": "A sum?"}], extra_body={"grammar": grammar})
        assert re.fullmatch(r"\([0-9][0-9]? \+ [0-9]\)", r.choices[0].message.content)


def test_structured_output_errors(server, client):
    import openai
    for body, param in [
        ({"structured_outputs": {"regex": "(ab"}}, "structured_outputs"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
        ({"guided_json": {"type": "object"}, "grammar": 'root ::= "a"'}, "grammar"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4,
                                           extra_body=body)
        assert e.value.body["param"] == param, e.value.body
    # Without --enable-auto-tool-choice, "auto" (the default with tools) is vLLM's 400.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=4)
    assert '"auto" tool choice requires --enable-auto-tool-choice' in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL_NAME, messages=ASK, tools=TOOLS, max_tokens=4,
            tool_choice={"type": "function", "function": {"name": "nope"}})
    assert e.value.body["param"] == "tool_choice"


def concurrently(fn, args, workers=8):
    """fn over args on `workers` threads (the engine batches them), results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, args))


# "required" with parallel_tool_calls (vLLM's schema: an array of calls with no upper bound):
# SmolLM2 at temperature 1 may keep adding calls until max_tokens, so the 20/20 runs are with
# parallel_tool_calls false (at most one call), and the parallel runs check that every complete
# call validates, also when the output was cut.
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_tool_choice_required(client, streamed):
    def run(seed):
        kwargs = dict(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
                      parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=400)
        if streamed:
            with client.chat.completions.stream(**kwargs) as stream:
                return stream.get_final_completion()
        return client.chat.completions.create(**kwargs)
    for r in concurrently(run, range(TRIES)):
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert len(choice.message.tool_calls) == 1
        check_calls(choice.message.tool_calls, SCHEMA_OF)


def test_tool_choice_required_parallel(client):
    for seed in range(5):
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required",
            temperature=1.0, seed=seed, max_tokens=400)
        choice = r.choices[0]
        assert choice.finish_reason in ("tool_calls", "length")
        check_calls(choice.message.tool_calls, SCHEMA_OF)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_tool_choice_named(client, streamed):
    named = {"type": "function", "function": {"name": "get_weather"}}

    def run(seed):
        kwargs = dict(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice=named,
                      temperature=1.0, seed=seed, max_tokens=300)
        if streamed:
            with client.chat.completions.stream(**kwargs) as stream:
                return stream.get_final_completion()
        return client.chat.completions.create(**kwargs)
    for r in concurrently(run, range(TRIES)):
        choice = r.choices[0]
        assert choice.finish_reason == "stop"  # OpenAI and vLLM: "stop" for a named choice
        assert len(choice.message.tool_calls) == 1
        check_calls(choice.message.tool_calls, ["get_weather"])


def test_streamed_tool_call_deltas(client):
    """The raw chunks: the first delta of a call has index, id, type, name and arguments "";
    later ones only argument fragments; the last chunk has finish_reason "tool_calls"."""
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="required", seed=1,
        parallel_tool_calls=False, temperature=1.0, max_tokens=400, stream=True))
    seen = {}
    for chunk in chunks:
        for tc in chunk.choices[0].delta.tool_calls or []:
            if tc.index not in seen:
                assert tc.id and tc.type == "function" and tc.function.name
                assert tc.function.arguments == ""
                seen[tc.index] = ""
            else:
                assert tc.id is None and tc.function.name is None
                seen[tc.index] += tc.function.arguments
    assert seen
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    for args in seen.values():
        json.loads(args)


@pytest.fixture(scope="module")
def hermes_server():
    s = Server("--enable-auto-tool-choice", "--tool-call-parser", "hermes",
               "--chat-template", os.path.join(HERE, "hermes_tool_template.jinja"))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def hermes_client(hermes_server):
    import openai
    return openai.OpenAI(base_url=hermes_server.base_url + "/v1", api_key="unused",
                         max_retries=0, timeout=300)


# The output a Hermes model writes for a call, as a regex: text before, then the call.
HERMES_CALL = (r'Let me check\.\n<tool_call>\n\{"name": "get_weather", "arguments": '
               r'\{"city": "[A-Z][a-z]{1,12}", "unit": "(celsius|fahrenheit)"\}\}\n</tool_call>')


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_auto_hermes_parser_finds_calls(hermes_client, streamed):
    for seed in range(5):
        kwargs = dict(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="auto",
                      temperature=1.0, seed=seed, max_tokens=200,
                      extra_body={"structured_outputs": {"regex": HERMES_CALL}})
        if streamed:
            with hermes_client.chat.completions.stream(**kwargs) as stream:
                r = stream.get_final_completion()
        else:
            r = hermes_client.chat.completions.create(**kwargs)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me check.\n"
        assert len(choice.message.tool_calls) == 1
        check_calls(choice.message.tool_calls, ["get_weather"])


def test_auto_without_constraint_is_consistent(hermes_client):
    """Whatever SmolLM2 answers under "auto": tool_calls exactly when its text held a parsable
    Hermes call; otherwise the text is the content, finish_reason is not tool_calls."""
    for seed in range(3):
        r = hermes_client.chat.completions.create(
            model=MODEL_NAME, messages=ASK, tools=TOOLS, temperature=1.0, seed=seed,
            max_tokens=120)
        choice = r.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
        else:
            assert choice.finish_reason in ("stop", "length")
            assert choice.message.content is not None


def test_tool_results_round_trip(hermes_client):
    """A conversation with an assistant tool call and its result renders and answers."""
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"},
    ]
    r = hermes_client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS,
                                              tool_choice="none", max_tokens=16, temperature=0)
    assert r.choices[0].message.content


def test_auto_tool_call_with_echo(hermes_client):
    """vLLM's chat echo under "auto": the echoed last message comes first in the content of the
    non-streamed message as in the stream (the call's own text is not content)."""
    messages = ASK + [{"role": "assistant", "content": "Sure. "}]
    kwargs = dict(model=MODEL_NAME, messages=messages, tools=TOOLS, tool_choice="auto",
                  temperature=1.0, seed=0, max_tokens=200,
                  extra_body={"structured_outputs": {"regex": HERMES_CALL}, "echo": True,
                              "add_generation_prompt": False,
                              "continue_final_message": True})
    plain = hermes_client.chat.completions.create(**kwargs)
    with hermes_client.chat.completions.stream(**kwargs) as stream:
        streamed = stream.get_final_completion()
    for r in (plain, streamed):
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Sure. Let me check.\n"
        check_calls(choice.message.tool_calls, ["get_weather"])


def test_chat_template_kwargs(hermes_server):
    """vLLM's chat_template_kwargs reach the template: {"enable_thinking": false} opens Qwen3's
    empty think block (hermes_tool_template.jinja), in /tokenize and in the chat prompt."""
    from test_openai_e2e import post_json

    def tokens(**extra):
        status, r = post_json(hermes_server, "/tokenize",
                              {"model": MODEL_NAME, "messages": ASK, **extra})
        assert status == 200, r
        return r["tokens"]

    def text_of(ids):
        status, r = post_json(hermes_server, "/detokenize", {"model": MODEL_NAME, "tokens": ids})
        assert status == 200, r
        return r["prompt"]

    plain = tokens()
    off = tokens(chat_template_kwargs={"enable_thinking": False})
    assert text_of(plain).endswith("<|im_start|>assistant\n")
    assert text_of(off) == text_of(plain) + "<think>\n\n</think>\n\n"
    # true, unset values (null, "auto" as vLLM) and keys the template does not read: no change.
    assert tokens(chat_template_kwargs={"enable_thinking": True, "other": [1, {"a": None}]}) == plain
    assert tokens(chat_template_kwargs={"enable_thinking": None}) == plain
    # The request's own variables win (vLLM: add_generation_prompt; octet: messages too).
    assert tokens(chat_template_kwargs={"add_generation_prompt": False, "messages": []}) == plain
    status, r = post_json(hermes_server, "/v1/chat/completions",
                          {"model": MODEL_NAME, "messages": ASK, "max_tokens": 1,
                           "temperature": 0, "return_token_ids": True,
                           "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200, r
    assert r["prompt_token_ids"] == off
    status, e = post_json(hermes_server, "/v1/chat/completions",
                          {"model": MODEL_NAME, "messages": ASK, "chat_template_kwargs": [1]})
    assert status == 400 and e["error"]["param"] == "chat_template_kwargs", e


def test_auto_tool_call_arguments_keep_numbers(hermes_client):
    """Parsed arguments are the model's own JSON (json.dumps layout), never re-serialized
    through doubles: a 23-digit integer and 0.1 arrive exactly, streamed and not."""
    args = '{"city": "Paris", "days": 12345678901234567890123, "x": 0.1, "y": 1e5}'
    regex = re.escape('<tool_call>\n{"name": "get_weather", "arguments": ' + args + '}\n</tool_call>')
    kwargs = dict(model=MODEL_NAME, messages=ASK, tools=TOOLS, tool_choice="auto",
                  temperature=0, max_tokens=200, extra_body={"structured_outputs": {"regex": regex}})
    plain = hermes_client.chat.completions.create(**kwargs)
    call = plain.choices[0].message.tool_calls[0]
    # vLLM's json.dumps(arguments): 1e5 is the float 100000.0; the integer keeps its digits.
    assert call.function.arguments == \
        '{"city": "Paris", "days": 12345678901234567890123, "x": 0.1, "y": 100000.0}'
    with hermes_client.chat.completions.stream(**kwargs) as stream:
        streamed = stream.get_final_completion()
    # Streamed: the model's text of the arguments as it grew (vLLM streams the raw text).
    assert streamed.choices[0].message.tool_calls[0].function.arguments == args
